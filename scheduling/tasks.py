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

from collections.abc import Callable

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
        _cycle_then_one_more()

    _run(self, services.SCHEDULING_CYCLE, settings.SCHEDULER_INTERVAL_S, periodic, cycle)


def _cycle_then_one_more() -> None:
    """A cycle; if work arrived during it (``cycle_again_request``), one more, spaced as a requested one."""
    from scheduling import services

    if services.cycle_run() is not None and services.cycle_again_pop():
        scheduling_cycle_task.apply_async(countdown=services.cycle_again_countdown())


def _then_the_cycle_turned_away(locked: Callable[[], object]) -> Callable[[], None]:
    """``locked`` (a service that holds the cycle lock while it works: the cluster sync, the sweep),
    then, if it held the lock and a cycle was turned away meanwhile (it asked for one more), that
    cycle, at once and in this task.

    Beat sends the cluster sync and the cycle every interval, the sync first: with thousands of pods
    a sync outlasts the gap, so beat's cycle finds the lock taken, and the next interval's sync takes
    it again before the next cycle. Left to beat, pending jobs waited for a cycle to win that race
    (55-59 s after a burst of 4,000 submissions, in 2 of 6 ``bench_fill`` runs)."""

    def run() -> None:
        from scheduling import services

        if locked() is not None and services.cycle_again_pop():
            _cycle_then_one_more()

    return run


@shared_task(bind=True, name="scheduling.tasks.cluster_sync", **TASK_OPTIONS)
def cluster_sync_task(self, periodic: bool = False) -> None:
    from scheduling import services

    sync = _then_the_cycle_turned_away(services.cluster_sync_run)
    _run(self, services.CLUSTER_SYNC, settings.CLUSTER_SYNC_INTERVAL_S, periodic, sync)
    # Team namespaces' ResourceQuota and LimitRange, at most once per NAMESPACE_SYNC_INTERVAL_S.
    if services.periodic_claim("namespace-sync", settings.NAMESPACE_SYNC_INTERVAL_S):
        _run(self, "namespace-sync", settings.NAMESPACE_SYNC_INTERVAL_S, False, services.namespaces_sync_run)


@shared_task(bind=True, name="scheduling.tasks.sweep", **TASK_OPTIONS)
def sweep_task(self, periodic: bool = False) -> None:
    from scheduling import services

    _run(self, "sweeper", settings.SWEEP_INTERVAL_S, periodic, _then_the_cycle_turned_away(services.jobs_sweep))
