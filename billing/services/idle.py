"""The idle-GPU check (beat, every ``IDLE_CHECK_INTERVAL_S``): flag, and if the queue says so stop,
running jobs whose GPUs stay idle.

Steps of ``idle_check``:

1. Running jobs that hold GPUs in a cluster queue with an enabled ``IdlePolicy``, whose current
   attempt has run for at least the policy's ``minutes`` and is not flagged yet.
2. The highest GPU utilization sample of the job over the last ``minutes``
   (``UtilizationSource.job_peak_utilization``). Unknown (no samples, no Prometheus) is never idle.
3. Under ``below_pct``: an ``IdleFlag`` for the attempt (once: the unique key). With ``stop``, under
   the job's row lock and only if it still runs that attempt, the job fails with the reason, its pods
   are deleted after the commit and its owner is told (the failure notification, which carries the
   reason); a cycle is asked for, as the freed GPUs may start waiting jobs.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from functools import partial

from django.db import IntegrityError, transaction
from django.utils import timezone

from billing.models import IdleFlag, IdlePolicy, idle_message
from billing.utilization import UtilizationSource, utilization_source
from portal.jobs.models import Job, JobAttempt
from portal.jobs.states import JobState
from portal.jobs.transitions import job_transition
from portal.notifications.services.notify import job_events_notify
from scheduling.adapters.contract import ClusterBackend
from scheduling.adapters.factory import cluster_backend

logger = logging.getLogger(__name__)


def idle_check(
    *, now: datetime | None = None, source: UtilizationSource | None = None, backend: ClusterBackend | None = None
) -> list[IdleFlag]:
    """Flag (and stop, per policy) the idle jobs; returns the flags written."""
    now = now or timezone.now()
    source = source or utilization_source()
    policies = {p.cluster_queue_id: p for p in IdlePolicy.objects.filter(enabled=True)}
    if not policies:
        return []
    # 1. Running GPU jobs in those queues, with their current attempt's start.
    jobs = Job.objects.filter(state=JobState.RUNNING, local_queue__cluster_queue_id__in=list(policies)).select_related(
        "team", "local_queue"
    )
    flagged = set(IdleFlag.objects.filter(job__in=jobs).values_list("job_id", "attempt"))
    starts = {
        (a.job_id, a.number): a.started_at
        for a in JobAttempt.objects.filter(job__in=jobs, ended_at__isnull=True, started_at__isnull=False)
    }
    written = []
    for job in jobs:
        policy = policies[job.local_queue.cluster_queue_id]
        started = starts.get((job.pk, job.attempt))
        window = timedelta(minutes=policy.minutes)
        if started is None or (job.pk, job.attempt) in flagged or now - started < window:
            continue
        if not (job.gpu or job.gpu_milli or job.mig_profile or job.gpu_memory_gib):
            continue
        # 2. The peak over the window.
        peak = source.job_peak_utilization(job_id=job.pk, namespace=job.team.namespace, start=now - window, end=now)
        if peak is None or peak >= policy.below_pct:
            continue
        # 3. Flag, and stop if the policy says so.
        flag = _flag(job=job, policy=policy, peak=peak, now=now, backend=backend)
        if flag is not None:
            written.append(flag)
    return written


def _flag(
    *, job: Job, policy: IdlePolicy, peak: float, now: datetime, backend: ClusterBackend | None
) -> IdleFlag | None:
    stop = policy.action == IdlePolicy.Action.STOP
    with transaction.atomic():
        # The row lock keeps a job that finished or was requeued since the read from being stopped.
        locked = Job.objects.select_for_update().filter(pk=job.pk, state=JobState.RUNNING, attempt=job.attempt).first()
        if locked is None:
            return None
        try:
            with transaction.atomic():
                flag = IdleFlag.objects.create(
                    job=locked,
                    attempt=locked.attempt,
                    flagged_at=now,
                    peak_util_pct=round(peak, 2),
                    below_pct=policy.below_pct,
                    minutes=policy.minutes,
                    stopped=stop,
                )
        except IntegrityError:  # a concurrent check flagged it first
            return None
        message = idle_message(peak_pct=peak, below_pct=policy.below_pct, minutes=policy.minutes)
        if stop:
            job_transition(
                job=locked, to_state=JobState.FAILED, at=now, reason=f"stopped by the idle-GPU policy: {message}"
            )
            transaction.on_commit(partial(_stop_pods, job_id=locked.pk, backend=backend), robust=True)
            job_events_notify(job_ids=[locked.pk])  # the beat's next cycle gives the GPUs to waiting jobs
        else:
            Job.objects.filter(pk=locked.pk).update(message=message[:500])
        logger.info("job %s idle (peak %.1f %%): %s", locked.pk, peak, "stopped" if stop else "flagged")
    return flag


def _stop_pods(*, job_id: int, backend: ClusterBackend | None) -> None:
    (backend or cluster_backend()).stop(job_id=job_id, grace_s=30)
