"""Billing writes: metering (with its sweeper and hourly rollup), the price book seed, capacity snapshots,
budget alerts.

``metering_run`` steps:
1. Find jobs with Running intervals not yet metered: closed ones, and open ones the sweeper closes
   because the job is no longer Running (its closing transition went missing, e.g. a worker died).
2. Cut each job's history into Running intervals. An interval opens at a transition to Running and
   closes at the next transition, whatever its kind: all of them carry the cluster's timestamps, so
   a job that ran while the workers were down is billed for exactly the time its pods ran.
3. The GPU model, share and capacity type come from the transition that opened the interval
   (recorded at admission), so a later requeue on another model cannot rewrite the past.
4. Ask the utilization source for each new interval (outside any lock: it may be a network call).
5. Under a lock, insert the records not yet present and add them, cut at hour boundaries, to the
   rollups in the same transaction, so they are always exactly the sum of the records:
   ``UsageHourly`` (per hour, team, queue, model, capacity type), ``GpuAllocationHourly`` (per hour and
   model: what idle is measured against) and ``TeamCostHourly`` (per hour and team, priced; re-priced
   as a whole when the price book has changed since it was priced).
"""

from __future__ import annotations

import contextlib
import logging
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from django.core.mail import send_mail
from django.db import IntegrityError, connection, transaction
from django.db.models import Count, F, Max, Min, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from billing import pricing
from billing.models import (
    Budget,
    BudgetAlert,
    CapacitySnapshot,
    CostRollupState,
    GpuAllocationHourly,
    PriceBookEntry,
    TeamCostHourly,
    UsageHourly,
    UsageRecord,
)
from billing.selectors import cost_rollup_current, gpu_model_names, portable_sql, price_list, price_segments_sql
from billing.utilization import UNKNOWN, Utilization, UtilizationSource, utilization_source
from portal.jobs.models import Job, JobTransition
from portal.jobs.states import JobState
from portal.tenants.models import Membership, Team
from portal.tenants.services import team_holds_replace
from scheduling.selectors import gpu_capacity

logger = logging.getLogger(__name__)

MICRO = Decimal("0.000001")
METERING_LOCK_KEY = 0x6770755F6D6574  # "gpu_met": one advisory-lock id for metering
BUDGET_HOLD = "budget"  # the TeamHold source of the budget hard stop


@dataclass(frozen=True, slots=True)
class RunInterval:
    job_id: int
    start: datetime
    end: datetime
    detail: dict


def run_intervals(
    transitions: list[JobTransition], *, job_state: str | None = None, closed_at: datetime | None = None
) -> list[RunInterval]:
    """Running intervals from one job's transitions (ordered by time).

    Any transition after a Running one closes it. An interval still open at the end of the history is
    returned only when the job is no longer Running (``job_state``): the sweeper closes it at
    ``closed_at`` (the job's last recorded cluster time), or drops it if that is unknown.
    """
    intervals: list[RunInterval] = []
    opened: JobTransition | None = None
    for transition in transitions:
        if opened is not None:
            if transition.at > opened.at:
                intervals.append(RunInterval(transition.job_id, opened.at, transition.at, opened.detail or {}))
            opened = None
        if transition.to_state == JobState.RUNNING:
            opened = transition
    sweep = opened is not None and job_state not in (None, JobState.RUNNING)
    if sweep and closed_at is not None and closed_at > opened.at:
        intervals.append(RunInterval(opened.job_id, opened.at, closed_at, opened.detail or {}))
    return intervals


def job_labels(job: Job) -> dict[str, str]:
    """Labels a usage record can be aggregated by (``label:<key>``)."""
    labels = {
        "kind": job.kind,
        "priority-class": job.priority_class.name,
        "owner": job.owner.get_username(),
    }
    labels.update({str(k): str(v) for k, v in (getattr(job, "labels", None) or {}).items()})
    return labels


def usage_for_interval(job: Job, interval: RunInterval, utilization: Utilization = UNKNOWN) -> UsageRecord:
    """The usage record of one interval. Exact integer figures first; rounded convenience ones from them."""
    micros = pricing.duration_us(interval.start, interval.end)
    detail = interval.detail
    if detail.get("gpus") not in (None, ""):
        share = pricing.gpu_share_7000ths(detail["gpus"])
    else:  # history recorded before admission details existed: the job's own request
        share = pricing.gpu_share_7000ths(Decimal(str(job.gpu_share_per_replica)) * job.replicas)
    replicas = int(detail.get("replicas") or job.replicas)
    gpu_usage = share * micros
    cpu_milli_us = job.cpu_milli * replicas * micros
    memory_mib_us = job.memory_mib * replicas * micros
    capacity_type = detail.get("capacity_type") or "on-demand"
    return UsageRecord(
        job=job,
        team_id=job.team_id,
        namespace=job.team.namespace,
        local_queue=job.local_queue.name,
        cluster_queue=job.local_queue.cluster_queue.name,
        gpu_model=detail.get("gpu_model") or "",
        capacity_type=capacity_type,
        start=interval.start,
        end=interval.end,
        gpus=(Decimal(share) / pricing.GPU_SHARE_DENOMINATOR).quantize(MICRO),
        gpu_seconds=pricing.ratio_to_decimal(gpu_usage, pricing.GPU_SHARE_DENOMINATOR * 1_000_000),
        cpu_core_seconds=pricing.ratio_to_decimal(cpu_milli_us, 1000 * 1_000_000),
        memory_gib_seconds=pricing.ratio_to_decimal(memory_mib_us, 1024 * 1_000_000),
        gpu_share_7000ths=share,
        duration_us=micros,
        gpu_usage=gpu_usage,
        cpu_milli_us=cpu_milli_us,
        memory_mib_us=memory_mib_us,
        gpu_util_pct=utilization.gpu_util_pct if share else None,
        gpu_fb_used_mib=utilization.fb_used_mib if share else None,
        labels=job_labels(job) | {"capacity-type": capacity_type},
    )


@contextlib.contextmanager
def metering_lock() -> Iterator[None]:
    """Serialize metering runs for the current transaction.

    Two workers metering at once would both see the same interval as new; the unique (job, start) key
    would keep the records single, but both would add the interval to the hourly rollup. A
    transaction-scoped advisory lock makes the second wait, then see the first one's records.
    SQLite (the single-process demo) serializes writers by itself.
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [METERING_LOCK_KEY])
    yield


def _jobs_to_meter(job_ids: list[int] | None):
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


def metering_run(*, job_ids: list[int] | None = None, source: UtilizationSource | None = None) -> int:
    """Meter every Running interval not yet metered. Returns the number of records inserted.

    Idempotent and safe to run concurrently: a second run (or a concurrent one) inserts nothing.
    """
    source = source or utilization_source()
    candidates: list[tuple[Job, RunInterval]] = []
    jobs = list(_jobs_to_meter(job_ids))
    transitions: dict[int, list[JobTransition]] = defaultdict(list)
    for transition in JobTransition.objects.filter(job__in=[j.pk for j in jobs]).order_by("job_id", "at", "id"):
        transitions[transition.job_id].append(transition)
    metered = set(UsageRecord.objects.filter(job__in=[j.pk for j in jobs]).values_list("job_id", "start"))
    for job in jobs:
        history = transitions[job.pk]
        closed_at = history[-1].at if history else None
        if job.finished_at and (closed_at is None or job.finished_at > closed_at):
            closed_at = job.finished_at
        candidates.extend(
            (job, interval)
            for interval in run_intervals(history, job_state=job.state, closed_at=closed_at)
            if (job.pk, interval.start) not in metered
        )
    if not candidates:
        if not cost_rollup_current():  # the price book changed since the cost rollup was priced
            cost_rollup_reprice()
        return 0
    records = []
    for job, interval in candidates:
        utilization = UNKNOWN
        if Decimal(str(interval.detail.get("gpus") or job.gpu_share_per_replica or 0)) > 0:
            utilization = source.job_utilization(
                job_id=job.pk, namespace=job.team.namespace, start=interval.start, end=interval.end
            )
        records.append(usage_for_interval(job, interval, utilization))
    with transaction.atomic(), metering_lock():
        # Re-read under the lock: a concurrent run may have metered some of these meanwhile.
        present = set(UsageRecord.objects.filter(job__in={r.job_id for r in records}).values_list("job_id", "start"))
        new = [r for r in records if (r.job_id, r.start) not in present]
        UsageRecord.objects.bulk_create(new, batch_size=1000)
        rollup_add(new)
    if new:
        logger.info("metering: %d new usage records", len(new))
    return len(new)


RollupKey = tuple[int, int, str, str, str, str]


def rollup_increments(records) -> dict[RollupKey, list]:
    """Records cut at hour boundaries and summed per rollup key (exact: pieces sum to the record).

    Values: [gpu_usage, cpu_milli_us, memory_mib_us, utilization-weighted usage (float), measured usage].
    """
    sums: dict[RollupKey, list] = defaultdict(lambda: [0, 0, 0, 0.0, 0])
    for record in records:
        pieces = pricing.hour_pieces(record.start, record.end)
        duration = max(1, record.duration_us)
        cpu_rate = int(record.cpu_milli_us) // duration  # cpu_milli × replicas, exactly
        memory_rate = int(record.memory_mib_us) // duration
        util = record.gpu_util_pct
        for hour, micros in pieces:
            key = (
                hour,
                record.team_id,
                record.local_queue,
                record.cluster_queue,
                record.gpu_model,
                record.capacity_type,
            )
            row = sums[key]
            gpu_usage = record.gpu_share_7000ths * micros
            row[0] += gpu_usage
            row[1] += cpu_rate * micros
            row[2] += memory_rate * micros
            if util is not None and gpu_usage:
                row[3] += util * gpu_usage
                row[4] += gpu_usage
    return sums


ROLLUP_UPSERT = """
INSERT INTO billing_usagehourly
    (epoch_hour, team_id, local_queue, cluster_queue, gpu_model, capacity_type,
     gpu_usage, cpu_milli_us, memory_mib_us, gpu_util_usage, gpu_util_measured_usage)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (epoch_hour, team_id, local_queue, cluster_queue, gpu_model, capacity_type) DO UPDATE SET
    gpu_usage = billing_usagehourly.gpu_usage + EXCLUDED.gpu_usage,
    cpu_milli_us = billing_usagehourly.cpu_milli_us + EXCLUDED.cpu_milli_us,
    memory_mib_us = billing_usagehourly.memory_mib_us + EXCLUDED.memory_mib_us,
    gpu_util_usage = billing_usagehourly.gpu_util_usage + EXCLUDED.gpu_util_usage,
    gpu_util_measured_usage = billing_usagehourly.gpu_util_measured_usage + EXCLUDED.gpu_util_measured_usage
"""


ALLOCATION_UPSERT = """
INSERT INTO billing_gpuallocationhourly (epoch_hour, gpu_model, capacity_type, gpu_usage) VALUES (%s, %s, %s, %s)
ON CONFLICT (epoch_hour, gpu_model, capacity_type) DO UPDATE SET
    gpu_usage = billing_gpuallocationhourly.gpu_usage + EXCLUDED.gpu_usage
"""

TEAM_COST_UPSERT = """
INSERT INTO billing_teamcosthourly
    (epoch_hour, team_id, gpu_usage, cpu_milli_us, memory_mib_us, gpu_cost_units, cpu_cost_units,
     memory_cost_units, gpu_util_usage, gpu_util_measured_usage)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (epoch_hour, team_id) DO UPDATE SET
    gpu_usage = billing_teamcosthourly.gpu_usage + EXCLUDED.gpu_usage,
    cpu_milli_us = billing_teamcosthourly.cpu_milli_us + EXCLUDED.cpu_milli_us,
    memory_mib_us = billing_teamcosthourly.memory_mib_us + EXCLUDED.memory_mib_us,
    gpu_cost_units = billing_teamcosthourly.gpu_cost_units + EXCLUDED.gpu_cost_units,
    cpu_cost_units = billing_teamcosthourly.cpu_cost_units + EXCLUDED.cpu_cost_units,
    memory_cost_units = billing_teamcosthourly.memory_cost_units + EXCLUDED.memory_cost_units,
    gpu_util_usage = billing_teamcosthourly.gpu_util_usage + EXCLUDED.gpu_util_usage,
    gpu_util_measured_usage = billing_teamcosthourly.gpu_util_measured_usage + EXCLUDED.gpu_util_measured_usage
"""


def _double(number: int) -> str:
    return f"CAST({number} AS DOUBLE PRECISION)"


_GPU_H, _CPU_H, _MEM_H = _double(pricing.GPU_HOUR), _double(pricing.CPU_CORE_HOUR), _double(pricing.MEMORY_GIB_HOUR)
_MICRO = 10**pricing.PLACES
_GPU_USD, _CPU_USD = _double(pricing.GPU_HOUR * _MICRO), _double(pricing.CPU_CORE_HOUR * _MICRO)
_MEM_USD = _double(pricing.MEMORY_GIB_HOUR * _MICRO)

# Chart figures of TeamCostHourly from its exact columns (the right-hand sides read the row's values).
TEAM_COST_FLOATS = f"""
UPDATE billing_teamcosthourly SET
    gpu_hours = CAST(gpu_usage AS DOUBLE PRECISION) / {_GPU_H},
    gpu_cost_usd = CAST(gpu_cost_units AS DOUBLE PRECISION) / {_GPU_USD},
    cpu_core_hours = CAST(cpu_milli_us AS DOUBLE PRECISION) / {_CPU_H},
    cpu_cost_usd = CAST(cpu_cost_units AS DOUBLE PRECISION) / {_CPU_USD},
    ram_gib_hours = CAST(memory_mib_us AS DOUBLE PRECISION) / {_MEM_H},
    ram_cost_usd = CAST(memory_cost_units AS DOUBLE PRECISION) / {_MEM_USD},
    total_cost_usd = CAST(gpu_cost_units AS DOUBLE PRECISION) / {_GPU_USD}
        + CAST(cpu_cost_units AS DOUBLE PRECISION) / {_CPU_USD}
        + CAST(memory_cost_units AS DOUBLE PRECISION) / {_MEM_USD},
    gpu_efficiency = CASE WHEN gpu_util_measured_usage > 0
        THEN gpu_util_usage / CAST(gpu_util_measured_usage AS DOUBLE PRECISION) / 100 END
WHERE epoch_hour >= %s AND epoch_hour <= %s
"""
TEAMS_FILTER = " AND team_id IN ({})"


def _executemany(sql: str, params: list[tuple]) -> None:
    with connection.cursor() as cursor:
        for start in range(0, len(params), 1000):
            cursor.executemany(sql, params[start : start + 1000])


def rollup_add(records: list[UsageRecord]) -> int:
    """Add new records to the hourly rollups (the caller holds the metering lock and a transaction).

    ``UsageHourly`` and ``GpuAllocationHourly`` always; ``TeamCostHourly`` when it is priced with the
    current price book, otherwise it is re-priced as a whole.
    """
    increments = rollup_increments(records)
    _executemany(ROLLUP_UPSERT, [(*key, *values) for key, values in increments.items()])
    allocated: dict[tuple[int, str, str], int] = defaultdict(int)
    for (hour, _team, _lq, _cq, model, ctype), values in increments.items():
        allocated[(hour, model, ctype)] += values[0]
    _executemany(ALLOCATION_UPSERT, [(*key, usage) for key, usage in allocated.items()])
    if increments:
        cost_rollup_add(increments)
    return len(increments)


def cost_rollup_add(increments: dict) -> None:
    """Price new hourly increments into ``TeamCostHourly``, or re-price it all if the book changed."""
    prices = price_list()
    version = pricing.price_version(prices)
    state = CostRollupState.objects.first()
    if state is None or state.price_version != version:
        cost_rollup_reprice()
        return
    hours = [key[0] for key in increments]
    models = {key[4] for key in increments} | {p.gpu_model for p in prices}
    lookup = pricing.PriceLookup(pricing.price_segments(prices, models, min(hours), max(hours) + 1))
    units = pricing.decimal_units
    per_team: dict[tuple[int, int], list] = defaultdict(lambda: [0, 0, 0, 0, 0, 0, 0.0, 0])
    for (hour, team_id, _lq, _cq, model, ctype), (gpu, cpu, memory, util, measured) in increments.items():
        gpu_usd, cpu_usd, memory_usd = lookup.at(model, ctype, hour)
        row = per_team[(hour, team_id)]
        row[0] += gpu
        row[1] += cpu
        row[2] += memory
        row[3] += gpu * units(gpu_usd)
        row[4] += cpu * units(cpu_usd)
        row[5] += memory * units(memory_usd)
        row[6] += util
        row[7] += measured
    rows = [
        (hour, team, g, c, m, Decimal(gc), Decimal(cc), Decimal(mc), u, um)
        for (hour, team), (g, c, m, gc, cc, mc, u, um) in per_team.items()
    ]
    _executemany(TEAM_COST_UPSERT, rows)
    team_ids = sorted({team for _hour, team in per_team})
    with connection.cursor() as cursor:
        cursor.execute(
            TEAM_COST_FLOATS + TEAMS_FILTER.format(", ".join(["%s"] * len(team_ids))),
            [min(hours), max(hours), *team_ids],
        )


def cost_rollup_reprice(*, now: datetime | None = None) -> int:
    """Recompute ``TeamCostHourly`` from ``UsageHourly`` with the current price book (caller holds the
    metering lock in a transaction, or this takes it). Returns the rows written."""
    with transaction.atomic(), metering_lock():
        prices = price_list()
        version = pricing.price_version(prices)
        TeamCostHourly.objects.all().delete()
        span = UsageHourly.objects.aggregate(lo=Min("epoch_hour"), hi=Max("epoch_hour"))
        written = 0
        if span["lo"] is not None:
            models = gpu_model_names() | set(UsageHourly.objects.values_list("gpu_model", flat=True).distinct())
            segments = pricing.price_segments(prices, models, span["lo"], span["hi"] + 1)
            exact = [
                pricing.PriceSegment(
                    s.gpu_model, s.capacity_type, s.hour_from, s.hour_to,
                    Decimal(pricing.decimal_units(s.gpu_usd)), Decimal(pricing.decimal_units(s.cpu_usd)),
                    Decimal(pricing.decimal_units(s.memory_usd)),
                )
                for s in segments
            ]  # fmt: skip
            cte, params = price_segments_sql(exact)
            with connection.cursor() as cursor:
                cursor.execute(
                    portable_sql(
                        f"""
                    WITH {cte}
                    INSERT INTO billing_teamcosthourly
                        (epoch_hour, team_id, gpu_usage, cpu_milli_us, memory_mib_us, gpu_cost_units,
                         cpu_cost_units, memory_cost_units, gpu_util_usage, gpu_util_measured_usage)
                    SELECT r.epoch_hour, r.team_id, SUM(r.gpu_usage), SUM(r.cpu_milli_us), SUM(r.memory_mib_us),
                        SUM(r.gpu_usage * COALESCE(p.gpu_usd, 0)), SUM(r.cpu_milli_us * COALESCE(p.cpu_usd, 0)),
                        SUM(r.memory_mib_us * COALESCE(p.memory_usd, 0)), SUM(r.gpu_util_usage),
                        SUM(r.gpu_util_measured_usage)
                    FROM billing_usagehourly r
                    LEFT JOIN p ON p.gpu_model = r.gpu_model AND p.capacity_type = r.capacity_type
                        AND r.epoch_hour >= p.h0 AND r.epoch_hour < p.h1
                    GROUP BY r.epoch_hour, r.team_id
                    """
                    ),
                    params,
                )
                written = TeamCostHourly.objects.count()
                cursor.execute(TEAM_COST_FLOATS, [span["lo"], span["hi"]])
        CostRollupState.objects.all().delete()
        CostRollupState.objects.create(price_version=version, repriced_at=now or timezone.now())
    logger.info("cost rollup re-priced: %d team-hours", written)
    return written


def rollup_rebuild() -> int:
    """Recompute every rollup from the usage records (repair after manual edits)."""
    with transaction.atomic(), metering_lock():
        UsageHourly.objects.all().delete()
        GpuAllocationHourly.objects.all().delete()
        CostRollupState.objects.all().delete()  # re-priced as a whole by the first rollup_add
        written = 0
        batch: list[UsageRecord] = []
        for record in UsageRecord.objects.order_by("id").iterator(chunk_size=5000):
            batch.append(record)
            if len(batch) == 20000:
                written += rollup_add(batch)
                batch = []
        written += rollup_add(batch)
        cost_rollup_reprice()
    return written


# --- price book -----------------------------------------------------------------------------------------

PRICE_SEED_FROM = datetime(2024, 1, 1, tzinfo=UTC)


def price_book_seed_defaults(*, effective_from: datetime = PRICE_SEED_FROM) -> int:
    """Insert the default public list prices (``billing.pricing.default_prices``) where missing.

    Idempotent: an entry for the same item and date is left as it is (an admin may have edited it).
    Returns the number of entries created.
    """
    created = 0
    for price in pricing.default_prices(effective_from):
        _, was_created = PriceBookEntry.objects.get_or_create(
            resource=price.resource,
            gpu_model=price.gpu_model,
            capacity_type=price.capacity_type,
            effective_from=price.effective_from,
            defaults={"usd_per_hour": price.usd_per_hour, "note": "public list price (seed)"},
        )
        created += was_created
    return created


# --- capacity ----------------------------------------------------------------------------------------------


def capacity_record(*, now: datetime | None = None, backend=None) -> int:
    """Record the cluster's GPUs per model and capacity type if they changed. Returns rows written.

    Capacity type comes from the node label ``settings.CAPACITY_TYPE_LABEL`` (on-demand when absent).
    Cordoned nodes still count: they are paid for, so their GPUs are idle capacity.
    """
    now = now or timezone.now()
    counts = gpu_capacity(backend=backend)
    with transaction.atomic():
        latest = capacity_latest()
        current = {key: gpus for key, (gpus, _) in counts.items()}
        if {k: v for k, v in latest.items() if v} == current:
            return 0
        rows = [
            CapacitySnapshot(at=now, gpu_model=model, capacity_type=ctype, gpu_count=gpus, node_count=nodes)
            for (model, ctype), (gpus, nodes) in sorted(counts.items())
        ]
        rows += [
            CapacitySnapshot(at=now, gpu_model=model, capacity_type=ctype, gpu_count=0)
            for (model, ctype), gpus in sorted(latest.items())
            if gpus and (model, ctype) not in counts
        ]
        # Two workers recording the same change at the same instant write the same figures: skip.
        CapacitySnapshot.objects.bulk_create(rows, ignore_conflicts=True)
    return len(rows)


def capacity_latest() -> dict[tuple[str, str], int]:
    latest: dict[tuple[str, str], int] = {}
    for model, ctype, gpus in CapacitySnapshot.objects.order_by("at", "id").values_list(
        "gpu_model", "capacity_type", "gpu_count"
    ):
        latest[(model, ctype)] = gpus
    return latest


# --- budgets -------------------------------------------------------------------------------------------------


def budget_alert_recipients(budget: Budget) -> list[str]:
    admins = Membership.objects.filter(team=budget.team, role=Membership.Role.TEAM_ADMIN).select_related("user")
    emails = {m.user.email for m in admins if m.user.email}
    emails |= {e.strip() for e in budget.alert_emails.split(",") if e.strip()}
    return sorted(emails)


def budget_check(*, now: datetime | None = None) -> list[BudgetAlert]:
    """Raise the 80 % and 100 % alerts of the current month for teams that reached them, once each.

    Each alert is created once per (team, month, threshold) — the unique key settles races between
    workers — and mailed to the team admins and the budget's extra addresses.
    """
    from billing.selectors import month_gpu_spend

    now = now or timezone.now()
    month = pricing.month_start(now)
    budgets = list(Budget.objects.select_related("team"))
    if not budgets:
        return []
    spend = month_gpu_spend(team_ids=[b.team_id for b in budgets], now=now)
    raised = []
    for budget in budgets:
        spent = spend.get(budget.team_id, Decimal(0))
        for threshold in pricing.thresholds_crossed(spend_usd=spent, budget_usd=budget.monthly_gpu_usd):
            try:
                with transaction.atomic():
                    alert, created = BudgetAlert.objects.get_or_create(
                        team=budget.team,
                        month=month.date(),
                        threshold_pct=threshold,
                        defaults={
                            "spend_usd": spent.quantize(Decimal("0.01")),
                            "budget_usd": budget.monthly_gpu_usd,
                            "created_at": now,
                        },
                    )
                    if created:
                        # Mailed before the alert commits: if the mail fails, no alert is recorded and the
                        # next check raises and mails it again, rather than never mailing it.
                        budget_alert_send(alert=alert, budget=budget)
            except IntegrityError:  # a concurrent check created it first
                continue
            if created:
                raised.append(alert)
    budget_holds_refresh(now=now)
    return raised


def budget_holds_refresh(*, now: datetime | None = None) -> int:
    """Hold the teams whose budget hard stop is reached (they may not start new jobs); lift the rest.

    The scheduling cycle reads the holds (``portal.tenants.selectors.team_holds``), so it never runs
    a cost query itself. Returns how many teams are held.
    """
    from billing.selectors import teams_over_budget

    over = dict(teams_over_budget(now=now))
    teams = {team: over[team.slug] for team in Team.objects.filter(slug__in=list(over))}
    team_holds_replace(source=BUDGET_HOLD, holds=teams, now=now)
    return len(teams)


def budget_alert_send(*, alert: BudgetAlert, budget: Budget) -> None:
    recipients = budget_alert_recipients(budget)
    if not recipients:
        return
    stop = (
        " New jobs of the team will not start until the month ends or the budget is raised."
        if budget.hard_stop and alert.threshold_pct >= 100
        else ""
    )
    send_mail(
        subject=f"[GPU portal] {alert.team.name}: {alert.threshold_pct} % of the monthly GPU budget used",
        message=(
            f"Team {alert.team.name} (namespace {alert.team.namespace}) has spent ${alert.spend_usd} on GPUs "
            f"in {alert.month:%B %Y}, {alert.threshold_pct} % or more of its ${alert.budget_usd} budget.{stop}"
        ),
        from_email=None,
        recipient_list=recipients,
        fail_silently=False,
    )
    alert.emailed_to = ", ".join(recipients)[:1000]
    alert.save(update_fields=["emailed_to"])
