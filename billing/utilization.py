"""Where GPU utilization comes from: Prometheus (the DCGM exporter) or the simulated cluster.

Both answer one question: the average GPU utilization (%) and framebuffer use (MiB) of a job's pods
over an interval. Metering asks it for each interval it bills; a source that cannot answer returns
``None`` figures and the interval is billed without utilization (efficiency then counts only
measured usage).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime
from typing import Any, Protocol

from django.conf import settings

from billing.core.usage import UNKNOWN, Utilization

logger = logging.getLogger(__name__)

GPU_UTIL_METRIC = "DCGM_FI_DEV_GPU_UTIL"
FB_USED_METRIC = "DCGM_FI_DEV_FB_USED"


class UtilizationSource(Protocol):
    name: str

    def job_utilization(self, *, job_id: int, namespace: str, start: datetime, end: datetime) -> Utilization: ...

    def job_peak_utilization(self, *, job_id: int, namespace: str, start: datetime, end: datetime) -> float | None:
        """The highest GPU utilization sample (%) of any of the job's GPUs in the interval; None when
        unmeasured (the idle-GPU policy never acts on an unknown)."""
        ...


class PrometheusError(Exception):
    pass


class PrometheusUtilization:
    """Reads DCGM exporter series through the Prometheus HTTP API (``/api/v1/query_range``).

    A job's pods are the series whose ``namespace`` label is the team's namespace and whose ``pod``
    label matches ``pod_regex`` (``{job_id}`` is replaced by the job's id). Utilization is averaged
    over every sample of every GPU of those pods in the interval.
    """

    name = "prometheus"

    def __init__(self, *, url: str, pod_regex: str = "job-{job_id}-.*", timeout_s: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self.pod_regex = pod_regex
        self.timeout_s = timeout_s

    def query_range(self, *, query: str, start: datetime, end: datetime, step_s: float) -> list[dict[str, Any]]:
        params = urllib.parse.urlencode(
            {
                "query": query,
                "start": f"{start.timestamp():.3f}",
                "end": f"{end.timestamp():.3f}",
                "step": f"{step_s:g}",
            }
        )
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/query_range?{params}", timeout=self.timeout_s) as response:
                body = json.loads(response.read())
        except (urllib.error.URLError, TimeoutError, ValueError) as exc:
            raise PrometheusError(f"Prometheus query failed: {exc}") from exc
        if body.get("status") != "success":
            raise PrometheusError(f"Prometheus answered {body.get('errorType')}: {body.get('error')}")
        return body["data"]["result"]

    def _samples(self, metric: str, *, selector: str, start: datetime, end: datetime) -> list[float]:
        # About 200 points per interval, never finer than Prometheus' usual 1 s resolution.
        step_s = max(1.0, math.ceil((end - start).total_seconds() / 200))
        return [
            float(value)
            for series in self.query_range(query=f"{metric}{{{selector}}}", start=start, end=end, step_s=step_s)
            for _, value in series.get("values", [])
            if value not in ("NaN", "+Inf", "-Inf")
        ]

    def _average(self, metric: str, *, selector: str, start: datetime, end: datetime) -> float | None:
        values = self._samples(metric, selector=selector, start=start, end=end)
        return sum(values) / len(values) if values else None

    def _selector(self, job_id: int, namespace: str) -> str:
        pod = self.pod_regex.replace("{job_id}", str(job_id))
        return f'namespace="{_escape(namespace)}",pod=~"{_escape(pod)}"'

    def job_peak_utilization(self, *, job_id: int, namespace: str, start: datetime, end: datetime) -> float | None:
        try:
            values = self._samples(GPU_UTIL_METRIC, selector=self._selector(job_id, namespace), start=start, end=end)
        except PrometheusError as exc:
            logger.warning("no utilization for job %s: %s", job_id, exc)
            return None
        return max(values) if values else None

    def job_utilization(self, *, job_id: int, namespace: str, start: datetime, end: datetime) -> Utilization:
        selector = self._selector(job_id, namespace)
        try:
            return Utilization(
                self._average(GPU_UTIL_METRIC, selector=selector, start=start, end=end),
                self._average(FB_USED_METRIC, selector=selector, start=start, end=end),
            )
        except PrometheusError as exc:
            logger.warning("no utilization for job %s: %s", job_id, exc)
            return UNKNOWN


def _escape(value: str) -> str:
    return re.sub(r'(["\\])', r"\\\1", value)


class SimulatedUtilization:
    """The simulated cluster's utilization: the backend's own figure when it offers one
    (``gpu_utilization(job_id=..., start=..., end=...)``), else a stable figure derived from the job id
    (5-100 %), so demo dashboards show a spread of efficient and wasteful jobs.
    """

    name = "simulated"

    def __init__(self, backend: Any = None) -> None:
        self.backend = backend

    def job_utilization(self, *, job_id: int, namespace: str, start: datetime, end: datetime) -> Utilization:
        own = getattr(self.backend, "gpu_utilization", None)
        if callable(own):
            value = own(job_id=job_id, start=start, end=end)
            if value is not None:
                return value if isinstance(value, Utilization) else Utilization(float(value), None)
        digest = hashlib.sha256(f"gpu-util:{job_id}".encode()).digest()
        util = 5 + digest[0] * 95 / 255
        return Utilization(round(util, 2), round(1024 + digest[1] * 300, 1))

    def job_peak_utilization(self, *, job_id: int, namespace: str, start: datetime, end: datetime) -> float | None:
        """The backend's own peak when it offers one (``gpu_peak_utilization``), else the job's steady
        figure (the simulated cluster's utilization does not vary within a run)."""
        own = getattr(self.backend, "gpu_peak_utilization", None)
        if callable(own):
            return own(job_id=job_id, start=start, end=end)
        return self.job_utilization(job_id=job_id, namespace=namespace, start=start, end=end).gpu_util_pct


class NoUtilization:
    """A real cluster without Prometheus: utilization is unknown, never invented."""

    name = "none"

    def job_utilization(self, *, job_id: int, namespace: str, start: datetime, end: datetime) -> Utilization:
        return UNKNOWN

    def job_peak_utilization(self, *, job_id: int, namespace: str, start: datetime, end: datetime) -> float | None:
        return None


def utilization_source() -> UtilizationSource:
    if settings.PROMETHEUS_URL:
        return PrometheusUtilization(
            url=settings.PROMETHEUS_URL, pod_regex=settings.BILLING_POD_REGEX, timeout_s=settings.PROMETHEUS_TIMEOUT_S
        )
    if settings.CLUSTER_BACKEND == "simulated":
        return SimulatedUtilization()
    return NoUtilization()
