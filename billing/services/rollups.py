"""Rollup writes: hourly usage (per queue, and per job owner and label set), all tenants' GPU allocation
and the priced per-team rollup, always exactly the sum of the usage records; re-pricing after a price
book change; rebuilding from records.

Every write here runs under ``metering_lock`` in a transaction (see there for the race it prevents).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections import defaultdict
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import Max, Min
from django.utils import timezone

from billing import sql
from billing.core.prices import PriceLookup, price_segments, price_version
from billing.core.usage import (
    GroupKey,
    HourUsage,
    RollupKey,
    group_increments,
    rollup_increments,
    team_cost_increments,
)
from billing.models import (
    CostRollupState,
    GpuAllocationHourly,
    TeamCostDaily,
    TeamCostHourly,
    UsageGroupHourly,
    UsageHourly,
    UsageRecord,
)
from billing.selectors.prices import gpu_model_names, price_list
from portal.jobs.models import Job

logger = logging.getLogger(__name__)

METERING_LOCK_KEY = 0x6770755F6D6574  # "gpu_met": one advisory-lock id for metering


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


def rollup_add(records: list[UsageRecord]) -> int:
    """Add new records to the hourly rollups (the caller holds the metering lock and a transaction).

    ``UsageHourly`` and ``GpuAllocationHourly`` always; ``TeamCostHourly`` when it is priced with the
    current price book, otherwise it is re-priced as a whole.
    """
    increments = rollup_increments(records)
    sql.execute_many(sql.ROLLUP_UPSERT, [(*key, *usage.as_row()) for key, usage in increments.items()])
    allocated: dict[tuple[int, str, str], int] = defaultdict(int)
    for (hour, _team, _lq, _cq, model, ctype), usage in increments.items():
        allocated[(hour, model, ctype)] += usage.gpu_usage
    sql.execute_many(sql.ALLOCATION_UPSERT, [(*key, usage) for key, usage in allocated.items()])
    group_rollup_add(records)
    if increments:
        cost_rollup_add(increments)
    return len(increments)


def group_rollup_add(records: list[UsageRecord]) -> int:
    """Add records to ``UsageGroupHourly`` (hour x team x job owner x label set x model x capacity type;
    the caller holds the metering lock and a transaction). Returns the rows written."""
    owners = dict(Job.objects.filter(pk__in={r.job_id for r in records}).values_list("pk", "owner_id"))
    rows = group_rollup_rows(group_increments(records, owners))
    sql.execute_many(sql.GROUP_UPSERT, rows)
    return len(rows)


def group_rollup_rows(increments: Mapping[GroupKey, HourUsage]) -> list[tuple[Any, ...]]:
    """``UsageGroupHourly`` rows (the columns of ``sql.GROUP_UPSERT``) of group increments, hour after hour."""
    return [
        (hour, team, owner, hashlib.sha256(text.encode()).hexdigest(), text, text, model, ctype, *usage.as_row())
        for (hour, team, owner, text, model, ctype), usage in sorted(increments.items())
    ]


GROUP_FIELDS = (
    "job_id", "team_id", "gpu_model", "capacity_type", "start", "end", "gpu_share_7000ths", "duration_us",
    "cpu_milli_us", "memory_mib_us", "gpu_util_pct", "labels",
)  # fmt: skip
"""What the group rollup reads of a usage record."""


def group_rollup_rebuild() -> int:
    """Recompute ``UsageGroupHourly`` alone from the usage records (its backfill; ``rollup_rebuild``
    recomputes every rollup). Returns the rows written."""
    with transaction.atomic(), metering_lock():
        UsageGroupHourly.objects.all().delete()
        return sum(group_rollup_add(batch) for batch in _record_batches(20000, *GROUP_FIELDS))


def _record_batches(size: int = 20000, *fields: str) -> Iterator[list[UsageRecord]]:
    """Every usage record in batches, in the order they were written (only ``fields``, if given)."""
    batch: list[UsageRecord] = []
    records = UsageRecord.objects.order_by("id")
    for record in (records.only(*fields) if fields else records).iterator(chunk_size=5000):
        batch.append(record)
        if len(batch) == size:
            yield batch
            batch = []
    yield batch


def cost_rollup_add(increments: Mapping[RollupKey, HourUsage]) -> None:
    """Price new hourly increments into ``TeamCostHourly``, or re-price it all if the book changed."""
    prices = price_list()
    state = CostRollupState.objects.first()
    if state is None or state.price_version != price_version(prices):
        cost_rollup_reprice()
        return
    hours = [key[0] for key in increments]
    models = {key[4] for key in increments} | {p.gpu_model for p in prices}
    lookup = PriceLookup(price_segments(prices, models, min(hours), max(hours) + 1))
    per_team = team_cost_increments(increments, lookup)
    sql.execute_many(sql.TEAM_COST_UPSERT, [(hour, team, *cost.as_row()) for (hour, team), cost in per_team.items()])
    per_day: dict[tuple[int, int], list[Any]] = {}
    for (hour, team), cost in per_team.items():
        row = cost.as_row()
        summed = per_day.setdefault((hour // 24, team), [0] * len(row))
        per_day[hour // 24, team] = [a + b for a, b in zip(summed, row, strict=True)]
    sql.execute_many(sql.TEAM_COST_DAILY_UPSERT, [(day, team, *row) for (day, team), row in per_day.items()])
    team_ids = sorted({team for _hour, team in per_team})
    sql.execute(
        sql.TEAM_COST_FLOATS + sql.TEAMS_FILTER.format(", ".join(["%s"] * len(team_ids))),
        [min(hours), max(hours), *team_ids],
    )


def cost_rollup_reprice(*, now: datetime | None = None) -> int:
    """Recompute ``TeamCostHourly`` from ``UsageHourly`` with the current price book (caller holds the
    metering lock in a transaction, or this takes it). Returns the rows written."""
    with transaction.atomic(), metering_lock():
        prices = price_list()
        TeamCostHourly.objects.all().delete()
        TeamCostDaily.objects.all().delete()
        span = UsageHourly.objects.aggregate(lo=Min("epoch_hour"), hi=Max("epoch_hour"))
        written = 0
        if span["lo"] is not None:
            models = gpu_model_names() | set(UsageHourly.objects.values_list("gpu_model", flat=True).distinct())
            segments = price_segments(prices, models, span["lo"], span["hi"] + 1)
            # Prices in whole 10^-6 USD: the database's sums are the exact cost numerators.
            cte, params = sql.price_segments_sql([s.in_units() for s in segments])
            sql.execute(sql.team_cost_reprice_sql(cte), params)
            written = TeamCostHourly.objects.count()
            sql.execute(sql.TEAM_COST_FLOATS, [span["lo"], span["hi"]])
            sql.execute(sql.TEAM_COST_DAILY_REBUILD, [])
        CostRollupState.objects.all().delete()
        CostRollupState.objects.create(price_version=price_version(prices), repriced_at=now or timezone.now())
    logger.info("cost rollup re-priced: %d team-hours", written)
    return written


def rollup_rebuild() -> int:
    """Recompute every rollup from the usage records (repair after manual edits)."""
    with transaction.atomic(), metering_lock():
        UsageHourly.objects.all().delete()
        UsageGroupHourly.objects.all().delete()
        GpuAllocationHourly.objects.all().delete()
        CostRollupState.objects.all().delete()  # re-priced as a whole by the first rollup_add
        written = sum(rollup_add(batch) for batch in _record_batches())
        cost_rollup_reprice()
    return written
