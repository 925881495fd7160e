"""The cost page's breakdowns over its window: by user, by a label, and guaranteed vs borrowed use.

By user and by label are the allocation's own figures (``aggregate="owner"`` and ``label:<key>``, read
from the hourly rollup per job owner and label set), so they add up to the namespace totals.
Guaranteed vs borrowed reads the jobs' attempts (``JobAttempt.borrowed``: whether the admission used
quota borrowed from the cohort): GPU-hours = billed share x the attempt's run inside the window, cost = those GPU-hours
priced hour by hour (the price book's GPU-hour price of the attempt's model and capacity type).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from billing import sql
from billing.core.allocation import AllocationQuery, Figures
from billing.core.units import epoch_hour, epoch_us
from billing.selectors.allocation import GroupReads, SharedReads
from billing.selectors.prices import price_segment_list

MICROS_PER_HOUR = 3_600_000_000
UNITS_PER_GPU = 7000
PLACES = Decimal("0.000001")
LABEL_KEYS_MAX = 20


@dataclass(frozen=True, slots=True)
class GroupCost:
    name: str
    gpu_hours: Decimal
    total_cost: Decimal


@dataclass(frozen=True, slots=True)
class UserAndLabel:
    """The by-user and by-label breakdowns of a window: ``label`` is the key ``by_label`` groups by (the
    one asked for if the window's usage has it, else the first of ``label_keys``; empty without labels)."""

    by_user: list[GroupCost]
    label_keys: list[str]
    label: str
    by_label: list[GroupCost]


def cost_by_user_and_label(
    query: AllocationQuery, *, key: str = "", now: datetime, shared: SharedReads | None = None
) -> UserAndLabel:
    """Cost per job owner and per value of label ``key`` (``__unallocated__``: usage without it), costliest
    first, and the window's label keys (at most ``LABEL_KEYS_MAX``: the jobs' own labels first, then the
    ones metering adds to every record, each part sorted), from one read of the group rollup."""
    reads = GroupReads(query, now=now, shared=shared)
    keys = sorted(reads.label_keys()[:LABEL_KEYS_MAX], key=lambda k: (k in AUTOMATIC_LABELS, k))
    if key not in keys:
        key = keys[0] if keys else ""
    by_label = _groups(reads.by_label(key)) if key else []
    return UserAndLabel(_groups(reads.by_owner()), keys, key, by_label)


def _groups(totals: dict[str, Figures]) -> list[GroupCost]:
    groups = [GroupCost(name, f.gpu_hours, f.total_cost) for name, f in totals.items()]
    return sorted(groups, key=lambda g: (-g.total_cost, g.name))


AUTOMATIC_LABELS = ("kind", "priority-class", "owner", "capacity-type")  # metering adds them (billing.records)


@dataclass(frozen=True, slots=True)
class QuotaUse:
    team: str
    guaranteed_gpu_hours: Decimal
    guaranteed_cost: Decimal
    borrowed_gpu_hours: Decimal
    borrowed_cost: Decimal


def cost_by_quota_use(
    *, start: datetime, end: datetime, now: datetime, team_ids: Iterable[int] | None
) -> list[QuotaUse]:
    """Per team: GPU-hours and GPU cost of attempts admitted within nominal quota and of borrowed ones."""
    stop = min(end, now)
    if start >= stop:
        return []
    ids = None if team_ids is None else sorted(team_ids)
    if ids == []:
        return []
    segments = price_segment_list(epoch_hour(start), epoch_hour(stop) + 1)
    query, params = sql.quota_use_sql(segments, None if ids is None else len(ids))
    usage: dict[tuple[str, bool], int] = defaultdict(int)  # 1/7000 GPU x µs
    cost: dict[tuple[str, bool], Decimal] = defaultdict(Decimal)  # that x USD per GPU-hour
    for team, borrowed, team_usage, team_cost in sql.fetch_all(
        query, [*params, epoch_us(start), epoch_us(stop), stop, start, *(ids or [])]
    ):
        usage[team, borrowed] += int(team_usage)
        cost[team, borrowed] += Decimal(team_cost)
    teams = sorted({team for team, _ in usage})

    def hours(key: tuple[str, bool]) -> Decimal:
        return (Decimal(usage[key]) / (UNITS_PER_GPU * MICROS_PER_HOUR)).quantize(PLACES)

    def usd(key: tuple[str, bool]) -> Decimal:
        return (cost[key] / (UNITS_PER_GPU * MICROS_PER_HOUR)).quantize(PLACES)

    return [QuotaUse(t, hours((t, False)), usd((t, False)), hours((t, True)), usd((t, True))) for t in teams]
