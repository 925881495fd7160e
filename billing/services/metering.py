"""Metering: every Running interval not yet metered becomes a usage record, added to the rollups in the
same transaction.

``metering_run`` steps:
1. Find jobs with Running intervals not yet metered: closed ones, and open ones the sweeper closes
   because the job is no longer Running (its closing transition went missing, e.g. a worker died).
2. Cut each job's history into Running intervals (``billing.core.intervals``). An interval opens at a
   transition to Running and closes at the next transition, whatever its kind: all of them carry the
   cluster's timestamps, so a job that ran while the workers were down is billed for exactly the time
   its pods ran.
3. The GPU model, share and capacity type come from the transition that opened the interval
   (recorded at admission), so a later requeue on another model cannot rewrite the past.
4. Ask the utilization source for each new interval (outside any lock: it may be a network call).
5. Under a lock, insert the records not yet present and add them, cut at hour boundaries, to the
   rollups in the same transaction, so they are always exactly the sum of the records
   (``billing.services.rollups``).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from decimal import Decimal

from django.db import transaction
from django.db.models import Count, F, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce

from billing.core.intervals import RunInterval, Transition, metered_intervals, run_intervals, sweep_time
from billing.core.usage import UNKNOWN, Utilization
from billing.models import UsageRecord
from billing.records import usage_record
from billing.selectors.prices import cost_rollup_current
from billing.selectors.usage import run_transitions
from billing.services.rollups import cost_rollup_reprice, metering_lock, rollup_add
from billing.utilization import UtilizationSource, utilization_source
from portal.jobs.models import Job, JobTransition
from portal.jobs.states import JobState

logger = logging.getLogger(__name__)


def _jobs_to_meter(job_ids: list[int] | None) -> QuerySet[Job]:
    """Jobs with more Running intervals than usage records (an open interval of a Running job aside).

    Counted with correlated subqueries (not joins) so a job's transitions and records are not
    multiplied together, and only jobs that ever ran are looked at.
    """
    runs = (
        JobTransition.objects.filter(job=OuterRef("pk"), to_state=JobState.RUNNING)
        .values("job")
        .annotate(n=Count("pk"))
        .values("n")
    )
    metered = UsageRecord.objects.filter(job=OuterRef("pk")).values("job").annotate(n=Count("pk")).values("n")
    jobs = (
        Job.objects.filter(pk__in=JobTransition.objects.filter(to_state=JobState.RUNNING).values("job_id"))
        .annotate(runs=Coalesce(Subquery(runs), 0), metered=Coalesce(Subquery(metered), 0))
        .filter(Q(runs__gt=F("metered") + 1) | (Q(runs__gt=F("metered")) & ~Q(state=JobState.RUNNING)))
    )
    if job_ids is not None:
        jobs = jobs.filter(pk__in=job_ids)
    return jobs.select_related("team", "local_queue__cluster_queue", "priority_class", "owner")


def _unmetered_intervals(job_ids: list[int] | None) -> list[tuple[Job, RunInterval]]:
    """Steps 1-3: the intervals to bill that have no record yet."""
    jobs = list(_jobs_to_meter(job_ids))
    histories: dict[int, list[Transition]] = defaultdict(list)
    for transition in run_transitions(jobs=[j.pk for j in jobs]):
        histories[transition.job_id].append(transition)
    metered = set(UsageRecord.objects.filter(job__in=[j.pk for j in jobs]).values_list("job_id", "start"))
    candidates: list[tuple[Job, RunInterval]] = []
    for job in jobs:
        history = histories[job.pk]
        intervals = metered_intervals(
            run_intervals(history),
            job_running=job.state == JobState.RUNNING,
            closed_at=sweep_time(history, job.finished_at),
        )
        candidates.extend((job, interval) for interval in intervals if (job.pk, interval.start) not in metered)
    return candidates


def _utilization(source: UtilizationSource, job: Job, interval: RunInterval) -> Utilization:
    """Step 4: measured only for intervals that held a GPU share."""
    if Decimal(str(interval.detail.get("gpus") or job.gpu_share_per_replica or 0)) > 0:
        return source.job_utilization(
            job_id=job.pk, namespace=job.team.namespace, start=interval.start, end=interval.closed_end
        )
    return UNKNOWN


def metering_run(*, job_ids: list[int] | None = None, source: UtilizationSource | None = None) -> int:
    """Meter every Running interval not yet metered. Returns the number of records inserted.

    Idempotent and safe to run concurrently: a second run (or a concurrent one) inserts nothing.
    """
    source = source or utilization_source()
    candidates = _unmetered_intervals(job_ids)
    if not candidates:
        if not cost_rollup_current():  # the price book changed since the cost rollup was priced
            cost_rollup_reprice()
        return 0
    records = [
        usage_record(job, interval, utilization=_utilization(source, job, interval)) for job, interval in candidates
    ]
    # Step 5.
    with transaction.atomic(), metering_lock():
        # Re-read under the lock: a concurrent run may have metered some of these meanwhile.
        present = set(UsageRecord.objects.filter(job__in={r.job_id for r in records}).values_list("job_id", "start"))
        new = [r for r in records if (r.job_id, r.start) not in present]
        UsageRecord.objects.bulk_create(new, batch_size=1000)
        rollup_add(new)
    if new:
        logger.info("metering: %d new usage records", len(new))
    return len(new)
