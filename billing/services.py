"""Metering: turn each job's closed Running intervals into usage records.

Steps:
1. Read the state history of jobs that ran: a Running interval opens at a transition to Running and
   closes at the next transition out of it.
2. For each closed interval, the GPU model, share and capacity type come from the transition that
   opened it (recorded at admission), so a later requeue on another model cannot rewrite the past.
3. Insert one UsageRecord per (job, interval start), ignoring conflicts: re-running the metering,
   or running it concurrently in two workers, inserts nothing twice and changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db import transaction

from billing.models import UsageRecord
from portal.jobs.models import Job, JobTransition
from portal.jobs.states import JobState

MICRO = Decimal("0.000001")


@dataclass(frozen=True, slots=True)
class RunInterval:
    job_id: int
    start: datetime
    end: datetime
    detail: dict


def run_intervals(transitions: list[JobTransition]) -> list[RunInterval]:
    """Closed Running intervals from one job's transitions (ordered by time)."""
    intervals: list[RunInterval] = []
    opened: JobTransition | None = None
    for transition in transitions:
        if transition.to_state == JobState.RUNNING:
            opened = transition
        elif opened is not None and transition.from_state == JobState.RUNNING:
            intervals.append(RunInterval(transition.job_id, opened.at, transition.at, opened.detail or {}))
            opened = None
    return intervals


def usage_for_interval(job: Job, interval: RunInterval) -> UsageRecord:
    duration = Decimal(str((interval.end - interval.start).total_seconds())).quantize(MICRO)
    gpus = Decimal(interval.detail.get("gpus") or "0").quantize(MICRO)
    replicas = Decimal(int(interval.detail.get("replicas") or job.replicas))
    return UsageRecord(
        job=job,
        team_id=job.team_id,
        namespace=job.team.namespace,
        local_queue=job.local_queue.name,
        cluster_queue=job.local_queue.cluster_queue.name,
        gpu_model=interval.detail.get("gpu_model", ""),
        capacity_type=interval.detail.get("capacity_type") or "on-demand",
        start=interval.start,
        end=interval.end,
        gpus=gpus,
        gpu_seconds=(gpus * duration).quantize(MICRO),
        cpu_core_seconds=(Decimal(job.cpu_milli) / 1000 * replicas * duration).quantize(MICRO),
        memory_gib_seconds=(Decimal(job.memory_mib) / 1024 * replicas * duration).quantize(MICRO),
    )


def metering_run(*, job_ids: list[int] | None = None) -> int:
    """Meter every closed Running interval not yet metered. Returns the number of new records."""
    jobs = Job.objects.filter(transitions__to_state=JobState.RUNNING).distinct()
    if job_ids is not None:
        jobs = jobs.filter(pk__in=job_ids)
    jobs = jobs.select_related("team", "local_queue__cluster_queue")
    metered = set(UsageRecord.objects.filter(job__in=jobs).values_list("job_id", "start"))
    records: list[UsageRecord] = []
    for job in jobs.prefetch_related("transitions"):
        transitions = sorted(job.transitions.all(), key=lambda t: (t.at, t.id))
        for interval in run_intervals(transitions):
            if (job.pk, interval.start) not in metered:
                records.append(usage_for_interval(job, interval))
    if not records:
        return 0
    with transaction.atomic():
        # ignore_conflicts relies on the unique (job, start) key: a concurrent run inserts nothing twice.
        created = UsageRecord.objects.bulk_create(records, ignore_conflicts=True, batch_size=1000)
    return len(created)
