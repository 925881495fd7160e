"""What a job has cost, attempt by attempt: run time, GPU-hours, cost so far and the estimated total.

An attempt's run is its Running interval, from ``JobAttempt.started_at`` to ``ended_at`` (or ``now``
while its pods run). Both ends are the times of the transitions metering cuts its intervals at
(written in the same transaction as the attempt), and the attempt keeps the share, CPU and memory
recorded at admission, so a finished attempt's figures are exactly its usage record's. Costs are
priced hour by hour from the price book, as the rollups are (``billing.core.usage.interval_sums``),
and reported as exact Decimals (``billing.core.allocation.figures_exact``): GPU, CPU and memory.

Two paths, one rule:

* ``job_costs``: per attempt and per job, in Python (job pages, the API);
* ``job_list_costed``: the job list's per-job figures as annotations (``run_us``, ``gpu_usage``,
  ``cost_num``), so the list sorts by them in the database and reads them without a query per row.
  ``tests/billing/selectors/test_jobs.py`` checks that both give the same figures.

The estimated total of an attempt that is still running is its cost up to its expected end: its
start plus the requested runtime in the cluster's time scale (``speedup``: the simulated cluster
runs jobs faster), at the prices in force; an attempt past its expected end is estimated at its cost
so far. A job waiting for its next admission has no estimated total (the GPU model it will get is not
known yet); a finished job's estimate is what it cost.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Protocol

from django.db.models import QuerySet
from django.db.models.expressions import RawSQL

from billing.core.allocation import Figures, UsageSums, figures_exact
from billing.core.prices import PriceLookup, price_segments
from billing.core.units import COST_SCALE, GPU, epoch_hour, epoch_us, ratio_to_decimal
from billing.core.usage import interval_sums
from billing.selectors.prices import gpu_model_names, price_list
from billing.sql import JOB_COST_SCALE, job_attempt_sums_sql, job_cost_sql
from portal.jobs.models import Job, JobAttempt
from portal.jobs.states import ACTIVE_STATES, JobState


@dataclass(frozen=True, slots=True)
class AttemptCost:
    """One attempt's figures: ``so_far`` up to now, and the estimated total of the whole attempt."""

    number: int
    run_s: float
    so_far: Figures
    estimated_total_usd: Decimal | None  # None while a job that runs until stopped runs (no end to price)


@dataclass(frozen=True, slots=True)
class JobCost:
    """A job's figures over all its attempts. ``estimated_total_usd`` is None while it waits for an
    admission (the model it will run on is not known yet) and while a job that runs until stopped
    (``Job.runs_until_stopped``) runs: it has no expected end; ``usd_per_hour`` is then what its
    running attempt costs an hour at today's prices."""

    run_s: float
    so_far: Figures
    estimated_total_usd: Decimal | None
    attempts: dict[int, AttemptCost]
    usd_per_hour: Decimal | None = None

    @property
    def gpu_hours(self) -> Decimal:
        return self.so_far.gpu_hours

    @property
    def cost_usd(self) -> Decimal:
        return self.so_far.total_cost


def _lookup(attempts: Sequence[JobAttempt], hour_from: int, hour_to: int) -> PriceLookup:
    """The prices of the attempts' models over the hours; none read when there is no attempt to price
    (jobs that never ran: a submission's answer, a page of pending jobs)."""
    if not attempts:
        return PriceLookup(())
    models = {a.gpu_model for a in attempts}
    return PriceLookup(price_segments(price_list(), models, hour_from, hour_to))


def _rates(attempt: JobAttempt) -> tuple[int, int, int]:
    return (attempt.gpu_share_7000ths, attempt.cpu_milli, attempt.memory_mib)


_HOUR = timedelta(hours=1)


def _expected_end(attempt: JobAttempt, *, runtime_s: int, speedup: float, now: datetime) -> datetime:
    """When an open attempt is expected to end: its start (now, if its pods have not started) plus the
    requested runtime in the cluster's time scale; never before now."""
    start = attempt.started_at or now
    return max(now, start + timedelta(seconds=runtime_s / speedup))


class CostedJob(Protocol):
    """What ``job_costs`` reads of a job: a ``Job``, or any object with these attributes (the API
    renders its job rows without building model instances: ``portal.api.job_rows``)."""

    @property
    def pk(self) -> Any: ...
    @property
    def runtime_s(self) -> int: ...
    @property
    def state(self) -> str: ...
    @property
    def finished_at(self) -> datetime | None: ...
    @property
    def restart_policy(self) -> str: ...
    @property
    def runs_until_stopped(self) -> bool: ...


def job_costs(
    *, jobs: Sequence[CostedJob], now: datetime, speedup: float = 1.0, attempts_read: Iterable[JobAttempt] | None = None
) -> dict[int, JobCost]:
    """Figures of each job and each of its attempts (two queries: the attempts and the price book).

    ``attempts_read``: the jobs' attempts when the caller has read them already (every one of them,
    in any order), instead of the first query."""
    if attempts_read is None:
        attempts_read = JobAttempt.objects.filter(job_id__in=[j.pk for j in jobs])
    attempts: dict[int, list[JobAttempt]] = defaultdict(list)
    for attempt in sorted(attempts_read, key=lambda a: (a.job_id, a.number)):
        attempts[attempt.job_id].append(attempt)
    flat = [a for rows in attempts.values() for a in rows]
    # An open attempt of a job that runs until stopped is priced over the next hour (its rate), not to an end.
    expected = {
        a.pk: (now + _HOUR)
        if job.runs_until_stopped
        else _expected_end(a, runtime_s=job.runtime_s, speedup=speedup, now=now)
        for job in jobs
        for a in attempts[job.pk]
        if a.ended_at is None
    }
    starts = [a.started_at for a in flat if a.started_at is not None]
    hour_from = epoch_hour(min(starts)) if starts else epoch_hour(now)
    hour_to = epoch_hour(max([now, *expected.values()])) + 1
    prices = _lookup(flat, hour_from, hour_to)
    return {job.pk: _job_cost(job, attempts[job.pk], prices=prices, expected=expected, now=now) for job in jobs}


def _job_cost(
    job: CostedJob, attempts: list[JobAttempt], *, prices: PriceLookup, expected: dict[int, datetime], now: datetime
) -> JobCost:
    total = UsageSums()
    per_attempt: dict[int, AttemptCost] = {}
    run_s = 0.0
    estimate: Decimal | None = Decimal(0)
    rate: Decimal | None = None
    for attempt in attempts:
        so_far = UsageSums()
        if attempt.started_at is not None:
            end = attempt.ended_at or now
            so_far = _priced(attempt, attempt.started_at, max(end, attempt.started_at), prices)
        figures = figures_exact(so_far)
        attempt_estimate: Decimal | None = figures.total_cost
        if attempt.ended_at is None and job.runs_until_stopped:
            rate = figures_exact(_priced(attempt, now, expected[attempt.pk], prices)).total_cost
            attempt_estimate = None
        elif attempt.ended_at is None:
            start = attempt.started_at or now
            attempt_estimate = figures_exact(_priced(attempt, start, expected[attempt.pk], prices)).total_cost
        per_attempt[attempt.number] = AttemptCost(attempt.number, attempt.run_s(now), figures, attempt_estimate)
        total.add(so_far)
        run_s += attempt.run_s(now)
        estimate = None if estimate is None or attempt_estimate is None else estimate + attempt_estimate
    figures = figures_exact(total) if attempts else _NOTHING
    if job.state == JobState.PENDING or (job.state not in ACTIVE_STATES and not _finished(job)):
        estimate = None
    elif _finished(job):
        # What it cost, rounded once from the exact sum (a sum of rounded attempts can be 10^-6 off).
        estimate = figures.total_cost
    return JobCost(
        run_s=run_s,
        so_far=figures,
        estimated_total_usd=estimate,
        attempts=per_attempt,
        usd_per_hour=rate if job.state in ACTIVE_STATES else None,
    )


# The figures of a job that never ran (every job of a queue's backlog): exact zeros, made once.
_NOTHING = figures_exact(UsageSums())


def _finished(job: CostedJob) -> bool:
    """Whether the job will not run again: a final state, or preempted without a requeue."""
    return job.finished_at is not None or (
        job.state == JobState.PREEMPTED and job.restart_policy != Job.RestartPolicy.REQUEUE
    )


def _priced(attempt: JobAttempt, start: datetime, end: datetime, prices: PriceLookup) -> UsageSums:
    return interval_sums(
        start=start,
        end=end,
        rates=_rates(attempt),
        gpu_model=attempt.gpu_model,
        capacity_type=attempt.capacity_type,
        prices=prices,
    )


@dataclass(frozen=True, slots=True)
class AttemptRun:
    """One attempt that ran, as the cost endpoint reports it: when, on what, at what price, what it cost."""

    number: int
    start: datetime
    end: datetime | None  # None while it runs (its figures run up to the report's time)
    outcome: str
    gpu_model: str
    capacity_type: str
    gpus: Decimal
    gpu_usd_per_hour: Decimal  # the price book's GPU price at the start of the run
    run_s: float
    figures: Figures
    estimated_total_usd: Decimal | None


@dataclass(frozen=True, slots=True)
class JobCostReport:
    """A job's cost so far over every attempt, and each attempt that ran (``GET /api/v1/jobs/<id>/cost/``)."""

    job_id: int
    as_of: datetime
    run_s: float
    figures: Figures
    estimated_total_usd: Decimal | None
    runs: list[AttemptRun]


def job_cost_report(*, job: Job, now: datetime, speedup: float = 1.0) -> JobCostReport:
    """``job_costs`` for one job, with each attempt that ran: its times, model, capacity type and price."""
    cost = job_costs(jobs=[job], now=now, speedup=speedup)[job.pk]
    ran = [(a, a.started_at) for a in JobAttempt.objects.filter(job=job).order_by("number") if a.started_at]
    prices = _lookup([a for a, _ in ran], min((epoch_hour(t) for _, t in ran), default=0), epoch_hour(now) + 1)
    runs = [
        AttemptRun(
            number=a.number,
            start=start,
            end=a.ended_at,
            outcome=a.outcome,
            gpu_model=a.gpu_model,
            capacity_type=a.capacity_type,
            gpus=a.gpus,
            gpu_usd_per_hour=prices.at(a.gpu_model, a.capacity_type, epoch_hour(start))[0],
            run_s=cost.attempts[a.number].run_s,
            figures=cost.attempts[a.number].so_far,
            estimated_total_usd=cost.attempts[a.number].estimated_total_usd,
        )
        for a, start in ran
    ]
    return JobCostReport(
        job_id=job.pk,
        as_of=now,
        run_s=cost.run_s,
        figures=cost.so_far,
        estimated_total_usd=cost.estimated_total_usd,
        runs=runs,
    )


# --- the job list: the same figures as annotations ------------------------------------------------------


def job_list_costed(jobs: QuerySet[Job], *, now: datetime) -> QuerySet[Job]:
    """``jobs`` annotated with ``run_us``, ``gpu_usage`` (1/7000 GPU × µs) and ``cost_num`` (the cost
    numerator over ``JOB_COST_SCALE × COST_SCALE``): sortable, and read by ``list_figures``.

    The price segments run from 1970 to now for every GPU model of the catalogue and the price book;
    an attempt on another model is priced by the fallback entries, as metering prices it."""
    segments = price_segments(price_list(), gpu_model_names(), 0, epoch_hour(now) + 1)
    column = f'"{Job._meta.db_table}"."id"'
    now_us = epoch_us(now)
    sums = job_attempt_sums_sql(column, now_us)
    cost_sql, cost_params = job_cost_sql(column, now_us, segments)
    return jobs.annotate(
        run_us=RawSQL(*sums["run_us"]),
        gpu_usage=RawSQL(*sums["gpu_usage"]),
        cost_num=RawSQL(cost_sql, cost_params),
    )


# Sort keys of job lists (pages' ?sort=, the API's ?ordering=): a key, and the ordering it means on
# ``job_list_costed``'s queryset; ties go newest first.
JOB_SORTS = {
    "submitted": "created_at",
    "owner": "owner__username",
    "state": "state",
    "run": "run_us",
    "gpu_hours": "gpu_usage",
    "cost": "cost_num",
}


def job_ordering(raw: str) -> tuple[str, list[str]]:
    """A sort (``cost``, ``-cost``, ...; anything else: newest first) and its queryset ordering."""
    key = raw.lstrip("-")
    if key not in JOB_SORTS:
        return "-submitted", ["-created_at", "-id"]
    return raw, [("-" if raw.startswith("-") else "") + JOB_SORTS[key], "-id"]


@dataclass(frozen=True, slots=True)
class ListFigures:
    """The list's figures of one job, from its annotations."""

    run_s: float
    gpu_hours: Decimal
    cost_usd: Decimal


def list_figures(job: Job) -> ListFigures:
    """Exact figures from ``job_list_costed``'s annotations (rounded once, as ``figures_exact`` does)."""
    run_us = getattr(job, "run_us", 0) or 0
    gpu_usage = round(getattr(job, "gpu_usage", 0) or 0)
    cost_num = round(getattr(job, "cost_num", 0) or 0)
    return ListFigures(
        run_s=float(run_us) / 1_000_000,
        gpu_hours=GPU.hours(gpu_usage),
        cost_usd=ratio_to_decimal(cost_num, JOB_COST_SCALE * COST_SCALE),
    )


@dataclass(frozen=True, slots=True)
class PlannedCost:
    """What a job not yet running would cost (a dry run's ``cost``): its billed GPU share, CPU and memory
    held from ``start`` to ``end``, priced hour by hour from the price book as metering will price it."""

    gpu_model: str
    capacity_type: str
    runtime_s: float
    price_per_gpu_hour: Decimal | None
    figures: Figures


def planned_cost(
    *,
    gpu_model: str,
    capacity_type: str,
    gpu_share_7000ths: int,
    cpu_milli: int,
    memory_mib: int,
    start: datetime,
    runtime_s: float,
) -> PlannedCost:
    """Cost of holding the shares (all replicas together) for ``runtime_s`` seconds from ``start``:
    GPU-hours × the effective GPU price of the model and capacity type, CPU and memory likewise."""
    end = start + timedelta(seconds=runtime_s)
    prices = PriceLookup(price_segments(price_list(), {gpu_model}, epoch_hour(start), epoch_hour(end) + 1))
    sums = interval_sums(
        start=start,
        end=end,
        rates=(gpu_share_7000ths, cpu_milli, memory_mib),
        gpu_model=gpu_model,
        capacity_type=capacity_type,
        prices=prices,
    )
    gpu_price = prices.at(gpu_model, capacity_type, epoch_hour(start))[0] if gpu_model else None
    return PlannedCost(gpu_model, capacity_type, runtime_s, gpu_price, figures_exact(sums))
