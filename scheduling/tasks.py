"""Celery tasks: thin wrappers that call one service each.

Every task is ``acks_late`` with ``reject_on_worker_lost``: a worker killed mid-task leaves its
message unacknowledged and Redis delivers it again, which is safe because each service is idempotent
and serialized by the cycle lock. Kubernetes API failures (5xx, timeouts) and lost database
connections are retried with exponential backoff. Runs sent by beat carry ``periodic=True`` and are
dropped when a run of the same task already happened in the current interval (see
``services.periodic_claim``), so a restarted or doubled beat does not run them twice.

The Django convention: services enqueue through the ``*_task`` names imported at module level; the
tasks import the services inside the function, so neither side needs a lazy import to avoid a circle.
"""

from __future__ import annotations

from celery import shared_task
from django.conf import settings
from django.db import InterfaceError, OperationalError

from scheduling.adapters.apply import LostCycleLock

RETRYABLE = (OperationalError, InterfaceError, LostCycleLock)
TASK_OPTIONS = {
    "ignore_result": True,
    "acks_late": True,
    "reject_on_worker_lost": True,
    "retry_backoff": True,
    "retry_backoff_max": 60,
    "retry_jitter": True,
    "max_retries": 5,
}


def _retryable() -> tuple[type[BaseException], ...]:
    """Resolved at run time, so importing the tasks never imports ``kubernetes``."""
    if settings.CLUSTER_BACKEND == "kubernetes":
        from scheduling.adapters.kubernetes_api import ClusterApiError

        return (*RETRYABLE, ClusterApiError)
    return RETRYABLE


def _run(task, name: str, interval_s: float, periodic: bool, fn) -> None:
    from scheduling import services

    if periodic and not services.periodic_claim(name, interval_s):
        return
    try:
        fn()
    except _retryable() as exc:
        raise task.retry(exc=exc, countdown=min(60, 2 ** (task.request.retries + 1))) from exc


@shared_task(bind=True, name="scheduling.tasks.scheduling_cycle", **TASK_OPTIONS)
def scheduling_cycle_task(self, periodic: bool = False, requested: int | None = None) -> None:
    """One cycle. ``requested``: a write's claim (``services.cycle_request_claim``), dropped when a
    cycle that started after the claim has run to its end (beat's, or another's that took the batch)."""
    from scheduling import services

    def cycle() -> None:
        if requested is not None and services.cycle_request_taken(requested):
            return
        if services.cycle_run() is not None and services.cycle_again_pop():
            # Work arrived during the cycle: one more, spaced as a requested one.
            scheduling_cycle_task.apply_async(countdown=services.cycle_again_countdown())

    _run(self, services.SCHEDULING_CYCLE, settings.SCHEDULER_INTERVAL_S, periodic, cycle)


@shared_task(bind=True, name="scheduling.tasks.cluster_sync", **TASK_OPTIONS)
def cluster_sync_task(self, periodic: bool = False) -> None:
    from scheduling import services

    _run(self, services.CLUSTER_SYNC, settings.CLUSTER_SYNC_INTERVAL_S, periodic, services.cluster_sync_run)
    # Team namespaces' ResourceQuota and LimitRange, at most once per NAMESPACE_SYNC_INTERVAL_S.
    if services.periodic_claim("namespace-sync", settings.NAMESPACE_SYNC_INTERVAL_S):
        _run(self, "namespace-sync", settings.NAMESPACE_SYNC_INTERVAL_S, False, services.namespaces_sync_run)


@shared_task(bind=True, name="scheduling.tasks.sweep", **TASK_OPTIONS)
def sweep_task(self, periodic: bool = False) -> None:
    from scheduling import services

    _run(self, "sweeper", settings.SWEEP_INTERVAL_S, periodic, services.jobs_sweep)
