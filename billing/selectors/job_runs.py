"""What one job cost so far: each Running interval of its history and the total, priced exactly.

``job_cost`` steps:
1. Cut the job's history into Running intervals (``billing.core.intervals.run_intervals``, the one
   builder metering uses). The open interval of a Running job ends at ``now``; one left open by a job
   that is no longer Running ends where the sweeper closes it (``sweep_time``), so the answer is the
   same before and after metering has run.
2. Each interval becomes an unsaved usage record (``billing.records.usage_record``: the share, model
   and capacity type recorded at admission) and is priced hour by hour with the price book
   (``billing.core.usage.record_usage_rows``, the allocation API's record path).
3. Figures are rounded once from the exact sums (``billing.core.allocation.figures_exact``), per
   interval and for the whole job.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from billing.core.allocation import Figures, UsageSums, figures_exact
from billing.core.intervals import RunInterval, run_intervals, sweep_time
from billing.core.prices import PriceLookup
from billing.core.units import epoch_hour
from billing.core.usage import record_usage_rows
from billing.records import usage_record
from billing.selectors.prices import price_segment_list
from billing.selectors.usage import run_transitions
from portal.jobs.models import Job
from portal.jobs.states import JobState


@dataclass(frozen=True, slots=True)
class RunCost:
    """One Running interval of a job (an attempt's run) and what it cost."""

    start: datetime
    end: datetime
    running: bool  # still open: ``end`` is the time of the answer
    gpu_model: str
    capacity_type: str
    gpus: Decimal  # billed GPUs held, all replicas together (0.25 for a quarter, 3/7 for a 3g slice)
    gpu_usd_per_hour: Decimal  # the price book's GPU price at the start of the interval
    figures: Figures


@dataclass(frozen=True, slots=True)
class JobCost:
    job_id: int
    as_of: datetime
    runs: list[RunCost]
    figures: Figures  # rounded once from the exact sum of every run (not the sum of rounded runs)


def _billed_intervals(job: Job, now: datetime) -> list[tuple[RunInterval, bool]]:
    """Step 1: (closed interval, whether it is the open interval of a Running job)."""
    history = run_transitions(jobs=[job.pk])
    closed_at = sweep_time(history, job.finished_at)
    billed = []
    for interval in run_intervals(history):
        if interval.end is not None:
            billed.append((interval, False))
        elif job.state == JobState.RUNNING:
            billed.append((interval.ending(max(now, interval.start)), True))
        elif closed_at is not None and closed_at > interval.start:
            billed.append((interval.ending(closed_at), False))
    return [(interval, running) for interval, running in billed if interval.closed_end > interval.start]


def job_cost(*, job: Job, now: datetime) -> JobCost:
    """The job's cost up to ``now`` (see the module docstring). The job must come with its team, local
    queue (and cluster queue), priority class and owner loaded."""
    intervals = _billed_intervals(job, now)
    if not intervals:
        return JobCost(job_id=job.pk, as_of=now, runs=[], figures=figures_exact(UsageSums()))
    records = [usage_record(job, interval) for interval, _ in intervals]
    start, end = min(r.start for r in records), max(r.end for r in records)
    hour_from, hour_to = epoch_hour(start), epoch_hour(end) + 1
    prices = PriceLookup(price_segment_list(hour_from, hour_to))
    rows = record_usage_rows(
        records,
        group_of=lambda record: record.start.isoformat(),
        window=(start, end),
        hour_from=hour_from,
        step_hours=hour_to - hour_from,  # one bucket: the whole job
        prices=prices,
    )
    per_run: dict[str, UsageSums] = {}
    total = UsageSums()
    for row in rows:
        per_run.setdefault(row.group, UsageSums()).add(row.sums)
        total.add(row.sums)
    runs = [
        RunCost(
            start=record.start,
            end=record.end,
            running=running,
            gpu_model=record.gpu_model,
            capacity_type=record.capacity_type,
            gpus=record.gpus,
            gpu_usd_per_hour=prices.at(record.gpu_model, record.capacity_type, epoch_hour(record.start))[0],
            figures=figures_exact(per_run.get(record.start.isoformat(), UsageSums())),
        )
        for record, (_, running) in zip(records, intervals, strict=True)
    ]
    return JobCost(job_id=job.pk, as_of=now, runs=runs, figures=figures_exact(total))
