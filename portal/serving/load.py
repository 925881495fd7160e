"""Where the autoscaler reads a service's load: Prometheus when ``PROMETHEUS_URL`` is set, else the
simulated cluster's synthetic load.

Prometheus: ``SERVING_RPS_QUERY`` or ``SERVING_CONCURRENCY_QUERY`` (by the service's metric) with
``{namespace}`` and ``{service}`` filled in, as an instant query; the sum of the result's values. A
Prometheus that does not answer leaves the service as it is (``None``), never scales it to zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

import requests
from django.conf import settings

from portal.serving.models import InferenceService


@dataclass(frozen=True, slots=True)
class Load:
    value: float
    source: str  # prometheus | simulated


def synthetic_load(*, service_id: int, peak: float, at_s: float, period_s: float) -> float:
    """The simulated cluster's load: a daily-like wave between 10 % and 100 % of ``peak``, its phase
    set by the service id (so two services do not move in step)."""
    phase = (service_id * 0.37) % 1.0
    return peak * (0.55 + 0.45 * math.sin(2 * math.pi * (at_s / period_s + phase)))


def service_load(service: InferenceService, *, now: datetime) -> Load | None:
    if settings.PROMETHEUS_URL:
        return _prometheus(service)
    peak = service.target_per_replica * service.max_replicas
    value = synthetic_load(
        service_id=service.pk, peak=peak, at_s=now.timestamp(), period_s=settings.SERVING_SIM_PERIOD_S
    )
    return Load(round(value, 3), "simulated")


def _prometheus(service: InferenceService) -> Load | None:
    template = (
        settings.SERVING_RPS_QUERY
        if service.metric == InferenceService.Metric.RPS
        else settings.SERVING_CONCURRENCY_QUERY
    )
    query = template.replace("{namespace}", service.team.namespace).replace("{service}", service.name)
    try:
        response = requests.get(
            settings.PROMETHEUS_URL.rstrip("/") + "/api/v1/query",
            params={"query": query},
            timeout=settings.PROMETHEUS_TIMEOUT_S,
        )
        response.raise_for_status()
        results = response.json()["data"]["result"]
        value = sum(float(item["value"][1]) for item in results)
    except (requests.RequestException, ValueError, KeyError, TypeError, IndexError):
        return None
    if math.isnan(value) or math.isinf(value):
        return None
    return Load(value, "prometheus")
