"""Calls to the Kubernetes API: the client's configuration, and one call with retries.

The ``scheduling.adapters.kubernetes*`` modules are the only ones that import the ``kubernetes``
client: this one (configuration, calls), ``kubernetes_informer`` (the caches) and ``kubernetes``
(the backend). What they read and write is translated by the pure ``scheduling.adapters.k8s``
package.

- ``K8sOptions`` holds the timeouts, retries and names, from settings (``K8S_*``).
- ``api_client_from_settings`` configures the client from ``KUBECONFIG`` or, without it, the
  pod's service account; the client's own retries are off (ours are bounded and back off).
- ``read_body`` reads a ``_preload_content=False`` response to its end, which hands its connection
  back to the pool;
- ``call`` makes one API call: a retryable failure (status 0, 408, 429, 5xx; a network error or
  timeout) is retried with exponential backoff and finally raises :class:`ClusterApiError`; any other
  failure (403, 404, 409, 422 …) propagates at once, for the caller to judge.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import urllib3
from django.conf import settings
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

# One logger for the whole family, the name it had before the family was split into modules.
logger = logging.getLogger("scheduling.adapters.kubernetes")

T = TypeVar("T")
RETRYABLE_STATUS = frozenset({0, 408, 429, 500, 502, 503, 504})
NETWORK_ERRORS = (urllib3.exceptions.HTTPError, OSError, TimeoutError)


class ClusterApiError(Exception):
    """A Kubernetes API call kept failing in a retryable way (5xx, 429, timeout, connection)."""


@dataclass(frozen=True, slots=True)
class K8sOptions:
    scheduler_name: str = "gpu-portal"
    rack_label: str = "topology.kubernetes.io/rack"
    timeout_s: float = 10.0  # connect and read timeout of every call
    watch_timeout_s: int = 60  # server-side length of one watch
    sync_timeout_s: float = 10.0  # how long a cycle waits for the caches to catch up
    grace_s: int = 30
    run_as_user: int = 1000
    retries: int = 3  # attempts per call on retryable failures
    backoff_s: float = 0.2  # first retry delay; doubles, capped at 5 s
    start_threads: int = 8  # pods created and bound at once when a cycle starts many jobs
    resync_s: float = 60.0  # the longest time between two full passes of observe and reconcile

    @property
    def request_timeout(self) -> tuple[float, float]:
        """Every call's ``_request_timeout``: connect and read."""
        return (self.timeout_s, self.timeout_s)

    def call(self, fn: Callable[[], T], what: str) -> T:
        """:func:`call` with these options' retries and backoff."""
        return call(fn, retries=self.retries, backoff_s=self.backoff_s, what=what)

    @classmethod
    def from_settings(cls) -> K8sOptions:
        return cls(
            scheduler_name=settings.K8S_SCHEDULER_NAME,
            rack_label=settings.K8S_RACK_LABEL,
            timeout_s=settings.K8S_TIMEOUT_S,
            watch_timeout_s=settings.K8S_WATCH_TIMEOUT_S,
            sync_timeout_s=settings.K8S_SYNC_TIMEOUT_S,
            grace_s=settings.K8S_POD_GRACE_S,
            run_as_user=settings.K8S_RUN_AS_USER,
            retries=settings.K8S_API_RETRIES,
            backoff_s=settings.K8S_API_BACKOFF_S,
            start_threads=settings.K8S_START_THREADS,
            resync_s=settings.K8S_RESYNC_S,
        )


def api_client_from_settings() -> client.ApiClient:
    """An API client from ``KUBECONFIG`` (first file of the list) or, without it, the in-cluster config."""
    configuration = client.Configuration()
    kubeconfig = settings.KUBECONFIG.split(os.pathsep)[0] if settings.KUBECONFIG else ""
    try:
        if kubeconfig:
            config.load_kube_config(
                config_file=kubeconfig, context=settings.K8S_CONTEXT or None, client_configuration=configuration
            )
        else:
            config.load_incluster_config(client_configuration=configuration)
    except ConfigException as exc:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(
            f"CLUSTER_BACKEND=kubernetes but no cluster configuration: {exc} "
            "(set KUBECONFIG, or run in a pod with a service account)"
        ) from exc
    # Retries are ours (with backoff and a bound); urllib3's own would multiply the timeouts.
    configuration.retries = False
    # One pooled connection per thread that starts pods (``K8sOptions.start_threads``), and the watches.
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize, settings.K8S_START_THREADS + 4)
    return client.ApiClient(configuration)


def read_body(response: Any) -> bytes:
    """The whole body of a ``_preload_content=False`` response (an ``urllib3.HTTPResponse``).

    Every such call reads its answer with this, inside the retried call (a connection dropped mid-body
    is a network error like any other): urllib3 hands a connection back to the pool only once its
    response has been read to the end. A response left unread keeps its connection until it is
    garbage-collected, so the next call opens a new one, and the API server accepts it; a pod's bind
    and event used to, two new connections per pod.
    """
    return bytes(response.data)


def call(fn: Callable[[], T], *, retries: int, backoff_s: float, what: str) -> T:
    """Run one API call, retrying retryable failures with exponential backoff; others propagate.

    ``retries`` counts attempts; anything below 1 still makes one (``K8S_API_RETRIES=0``: no retry).
    """
    retries = max(1, retries)
    for attempt in range(retries):
        try:
            return fn()
        except ApiException as exc:
            if exc.status not in RETRYABLE_STATUS:
                raise
            error: Exception = exc
        except NETWORK_ERRORS as exc:
            error = exc
        if attempt + 1 < retries:
            time.sleep(min(5.0, backoff_s * 2**attempt))
    logger.warning("kubernetes: %s failed after %d attempts: %s", what, retries, error)
    raise ClusterApiError(f"{what}: {error}") from error
