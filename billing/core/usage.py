"""What Running intervals used, in exact units: per interval, cut at hour boundaries, priced; and the
idle GPU capacity measured against it.

* ``interval_usage``: the exact figures of one interval from its admission detail and the job's request.
* ``rollup_increments``: records cut at hour boundaries and summed per rollup key (the pieces sum to the
  record exactly); ``team_cost_increments`` prices them per team and hour.
* ``record_usage_rows``: records cut at hour boundaries inside a window, priced hour by hour and summed
  per (group, step bucket, model, capacity type): the Python path of the cost formula, which the SQL
  paths of ``billing.sql`` must equal (``tests/billing/test_sql.py``).
* ``capacity_usage`` and ``idle_rows``: recorded capacity per hour minus every tenant's allocation,
  clamped at zero hour by hour, priced at the model's GPU price.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, Protocol, TypeVar

from billing.core.allocation import IdleRow, UsageRow, UsageSums
from billing.core.prices import PriceLookup, PriceTriple
from billing.core.units import (
    CPU,
    GPU,
    MEMORY,
    US_PER_HOUR,
    duration_us,
    epoch_us,
    hour_pieces,
    ratio_to_decimal,
)
from scheduling.engine.shares import BILLED_UNITS_PER_GPU, billed_gpus, billed_units_of_gpus


@dataclass(frozen=True, slots=True)
class Utilization:
    """A job's average GPU utilization (%) and framebuffer use (MiB) over an interval, if measured."""

    gpu_util_pct: float | None
    fb_used_mib: float | None


UNKNOWN = Utilization(None, None)


@dataclass(frozen=True, slots=True)
class IntervalUsage:
    """Exact usage of one Running interval; the rounded convenience figures derive from it."""

    gpu_model: str
    capacity_type: str
    share: int  # billed units (1/7000 GPU) held, all replicas together
    duration_us: int
    gpu_usage: int
    cpu_milli_us: int
    memory_mib_us: int

    @property
    def gpus(self) -> Decimal:
        return billed_gpus(self.share)

    @property
    def gpu_seconds(self) -> Decimal:
        return ratio_to_decimal(self.gpu_usage, BILLED_UNITS_PER_GPU * 1_000_000)

    @property
    def cpu_core_seconds(self) -> Decimal:
        return ratio_to_decimal(self.cpu_milli_us, 1000 * 1_000_000)

    @property
    def memory_gib_seconds(self) -> Decimal:
        return ratio_to_decimal(self.memory_mib_us, 1024 * 1_000_000)


def interval_usage(
    *,
    start: datetime,
    end: datetime,
    detail: Mapping[str, Any],
    requested_gpus: Decimal,
    replicas: int,
    cpu_milli: int,
    memory_mib: int,
) -> IntervalUsage:
    """Usage of [start, end) at the share recorded at admission (``detail``); history recorded before
    admission details existed falls back to the job's own request (``requested_gpus``, ``replicas``,
    ``cpu_milli`` and ``memory_mib`` per replica). The detail's CPU and memory are all replicas'
    together (a Ray job's head and workers differ)."""
    micros = duration_us(start, end)
    gpus = detail.get("gpus")
    share = billed_units_of_gpus(gpus if gpus not in (None, "") else requested_gpus)
    replicas = int(detail.get("replicas") or replicas)
    return IntervalUsage(
        gpu_model=detail.get("gpu_model") or "",
        capacity_type=detail.get("capacity_type") or "on-demand",
        share=share,
        duration_us=micros,
        gpu_usage=share * micros,
        cpu_milli_us=int(detail.get("cpu_milli") or cpu_milli * replicas) * micros,
        memory_mib_us=int(detail.get("memory_mib") or memory_mib * replicas) * micros,
    )


class MeteredUsage(Protocol):
    """What the usage arithmetic reads of a usage record (a ``UsageRecord`` row or a plain value)."""

    @property
    def team_id(self) -> int: ...
    @property
    def local_queue(self) -> str: ...
    @property
    def cluster_queue(self) -> str: ...
    @property
    def gpu_model(self) -> str: ...
    @property
    def capacity_type(self) -> str: ...
    @property
    def start(self) -> datetime: ...
    @property
    def end(self) -> datetime: ...
    @property
    def gpu_share_7000ths(self) -> int: ...
    @property
    def duration_us(self) -> int: ...
    @property
    def cpu_milli_us(self) -> int | Decimal: ...
    @property
    def memory_mib_us(self) -> int | Decimal: ...
    @property
    def gpu_util_pct(self) -> float | None: ...


K = TypeVar("K")

RollupKey = tuple[int, int, str, str, str, str]
"""(epoch hour, team id, local queue, cluster queue, GPU model, capacity type)"""


@dataclass(slots=True)
class HourUsage:
    """Usage summed for one rollup key (the columns of ``UsageHourly``)."""

    gpu_usage: int = 0
    cpu_milli_us: int = 0
    memory_mib_us: int = 0
    util_usage: float = 0.0  # Σ utilization % × gpu_usage over measured usage (a weight, not money)
    measured_usage: int = 0

    def as_row(self) -> tuple[int, int, int, float, int]:
        return (self.gpu_usage, self.cpu_milli_us, self.memory_mib_us, self.util_usage, self.measured_usage)


def rollup_increments(records: Iterable[MeteredUsage]) -> dict[RollupKey, HourUsage]:
    """Records cut at hour boundaries and summed per rollup key (exact: pieces sum to the record)."""

    def key_of(record: MeteredUsage, hour: int) -> RollupKey:
        return (hour, record.team_id, record.local_queue, record.cluster_queue, record.gpu_model, record.capacity_type)

    return hour_increments(records, key_of)


GroupKey = tuple[int, int, int, str, str, str]
"""(epoch hour, team id, job owner's user id, label set as canonical JSON, GPU model, capacity type)"""


def labels_text(labels: Mapping[str, Any] | None) -> str:
    """A label set as one canonical JSON text (sorted keys, no spaces): the group rollup's key."""
    return json.dumps(dict(labels or {}), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def group_increments(records: Iterable[Any], owners: Mapping[int, int]) -> dict[GroupKey, HourUsage]:
    """Records (with ``job_id`` and ``labels``) cut at hour boundaries and summed per (hour, team, owner,
    label set, model, capacity type); ``owners`` maps each record's job id to its owner's user id."""
    texts: dict[int, str] = {}

    def key_of(record: Any, hour: int) -> GroupKey:
        text = texts.get(id(record))
        if text is None:
            text = texts[id(record)] = labels_text(record.labels)
        owner = owners[record.job_id]
        return (hour, record.team_id, owner, text, record.gpu_model, record.capacity_type)

    return hour_increments(records, key_of)


def hour_increments(records: Iterable[MeteredUsage], key_of: Callable[[Any, int], K]) -> dict[K, HourUsage]:
    """Records cut at hour boundaries and summed per ``key_of(record, hour)`` (exact: the pieces sum to
    the record; CPU and memory at the record's exact rate per microsecond)."""
    sums: dict[K, HourUsage] = defaultdict(HourUsage)
    for record in records:
        duration = max(1, record.duration_us)
        cpu_rate = int(record.cpu_milli_us) // duration  # cpu_milli × replicas, exactly
        memory_rate = int(record.memory_mib_us) // duration
        util = record.gpu_util_pct
        for hour, micros in hour_pieces(record.start, record.end):
            row = sums[key_of(record, hour)]
            gpu_usage = record.gpu_share_7000ths * micros
            row.gpu_usage += gpu_usage
            row.cpu_milli_us += cpu_rate * micros
            row.memory_mib_us += memory_rate * micros
            if util is not None and gpu_usage:
                row.util_usage += util * gpu_usage
                row.measured_usage += gpu_usage
    return sums


@dataclass(slots=True)
class TeamHourCost:
    """One team-hour of ``TeamCostHourly``: usage and exact cost numerators."""

    usage: HourUsage
    gpu_cost_units: int = 0
    cpu_cost_units: int = 0
    memory_cost_units: int = 0

    def as_row(self) -> tuple[int, int, int, Decimal, Decimal, Decimal, float, int]:
        """The ``TeamCostHourly`` columns after (epoch hour, team id)."""
        u = self.usage
        costs = (Decimal(self.gpu_cost_units), Decimal(self.cpu_cost_units), Decimal(self.memory_cost_units))
        return (u.gpu_usage, u.cpu_milli_us, u.memory_mib_us, *costs, u.util_usage, u.measured_usage)


def team_cost_increments(
    increments: Mapping[RollupKey, HourUsage], prices: PriceLookup
) -> dict[tuple[int, int], TeamHourCost]:
    """Hourly increments priced and summed per (epoch hour, team id)."""
    per_team: dict[tuple[int, int], TeamHourCost] = {}
    for (hour, team_id, _lq, _cq, model, ctype), usage in increments.items():
        gpu_usd, cpu_usd, memory_usd = prices.at(model, ctype, hour)
        row = per_team.get((hour, team_id))
        if row is None:
            row = per_team[(hour, team_id)] = TeamHourCost(HourUsage())
        row.usage.gpu_usage += usage.gpu_usage
        row.usage.cpu_milli_us += usage.cpu_milli_us
        row.usage.memory_mib_us += usage.memory_mib_us
        row.gpu_cost_units += GPU.cost_units(usage.gpu_usage, gpu_usd)
        row.cpu_cost_units += CPU.cost_units(usage.cpu_milli_us, cpu_usd)
        row.memory_cost_units += MEMORY.cost_units(usage.memory_mib_us, memory_usd)
        row.usage.util_usage += usage.util_usage
        row.usage.measured_usage += usage.measured_usage
    return per_team


def priced_piece_add(sums: UsageSums, rates: tuple[int, int, int], micros: int, prices: PriceTriple) -> int:
    """Add ``micros`` of usage at ``rates`` (GPU share in 1/7000, milli-cores, MiB) and its cost at
    ``prices`` (GPU, CPU core, memory GiB USD per hour) to ``sums``; returns the GPU usage added."""
    share, cpu_milli, memory_mib = rates
    gpu_usd, cpu_usd, memory_usd = prices
    gpu_usage, cpu, memory = share * micros, cpu_milli * micros, memory_mib * micros
    sums.gpu_usage += gpu_usage
    sums.gpu_cost_units += GPU.cost_units(gpu_usage, gpu_usd)
    sums.cpu_milli_us += cpu
    sums.cpu_cost_units += CPU.cost_units(cpu, cpu_usd)
    sums.memory_mib_us += memory
    sums.memory_cost_units += MEMORY.cost_units(memory, memory_usd)
    return gpu_usage


def interval_sums(
    *,
    start: datetime,
    end: datetime,
    rates: tuple[int, int, int],
    gpu_model: str,
    capacity_type: str,
    prices: PriceLookup,
) -> UsageSums:
    """Exact usage and cost of holding ``rates`` (GPU share in 1/7000, milli-cores, MiB) over
    [start, end), priced hour by hour as metering's rollups are (a price holds from its hour on)."""
    sums = UsageSums()
    for hour, micros in hour_pieces(start, end):
        priced_piece_add(sums, rates, micros, prices.at(gpu_model, capacity_type, hour))
    return sums


def record_usage_rows(
    records: Iterable[MeteredUsage],
    *,
    group_of: Callable[[Any], str],
    window: tuple[datetime, datetime],
    hour_from: int,
    step_hours: int,
    prices: PriceLookup,
) -> list[UsageRow]:
    """Records cut at hour boundaries inside the window, priced per hour, summed per (group, bucket,
    model, capacity type). ``group_of(record)`` names a record's group."""
    sums: dict[tuple[str, int, str, str], UsageSums] = {}
    for record in records:
        start, end = max(record.start, window[0]), min(record.end, window[1])
        if start >= end:
            continue
        group = group_of(record)
        replicas_cpu = int(record.cpu_milli_us) // max(1, record.duration_us)
        replicas_memory = int(record.memory_mib_us) // max(1, record.duration_us)
        for hour, micros in hour_pieces(start, end):
            key = (group, (hour - hour_from) // step_hours, record.gpu_model, record.capacity_type)
            row = sums.get(key)
            if row is None:
                row = sums[key] = UsageSums()
            rates = (record.gpu_share_7000ths, replicas_cpu, replicas_memory)
            gpu_usage = priced_piece_add(row, rates, micros, prices.at(record.gpu_model, record.capacity_type, hour))
            if record.gpu_util_pct is not None and gpu_usage:
                row.util_usage += round(record.gpu_util_pct * gpu_usage)
                row.util_measured_usage += gpu_usage
    return [UsageRow(g, b, m, c, s) for (g, b, m, c), s in sums.items()]


def capacity_usage(changes: Sequence[tuple[datetime, int]], hour_from: int, hour_to: int) -> dict[int, int]:
    """GPU capacity per epoch hour in 1/7000-GPU-µs from (time, GPU count) change points.

    A count holds from its time until the next change; before the first change nothing is known (0).
    Integer arithmetic on epoch microseconds: a month of hours for every model costs next to nothing.
    """
    out: dict[int, int] = {}
    ordered = sorted(changes)
    lo, hi = hour_from * US_PER_HOUR, hour_to * US_PER_HOUR
    for index, (at, count) in enumerate(ordered):
        until = epoch_us(ordered[index + 1][0]) if index + 1 < len(ordered) else hi
        start, end = max(epoch_us(at), lo), min(until, hi)
        if count <= 0 or start >= end:
            continue
        weight = count * BILLED_UNITS_PER_GPU
        hour = start // US_PER_HOUR
        while start < end:
            boundary = min((hour + 1) * US_PER_HOUR, end)
            out[hour] = out.get(hour, 0) + weight * (boundary - start)
            start, hour = boundary, hour + 1
    return out


def idle_rows(
    *,
    capacity: Mapping[tuple[str, str], Sequence[tuple[datetime, int]]],
    allocated: Mapping[tuple[int, str, str], int],
    running: Iterable[MeteredUsage],
    window: tuple[datetime, datetime],
    hour_from: int,
    hour_to: int,
    step_hours: int,
    prices: PriceLookup,
) -> list[IdleRow]:
    """Capacity minus every tenant's allocation per bucket, model and capacity type, clamped hourly.

    ``capacity``: (time, GPUs) change points per (model, capacity type); ``allocated``: metered GPU
    usage per (hour, model, capacity type); ``running``: running jobs' open usage, added to it.
    """
    used_by: dict[tuple[int, str, str], int] = defaultdict(int, allocated)
    for record in running:
        for hour, micros in hour_pieces(max(record.start, window[0]), min(record.end, window[1])):
            used_by[(hour, record.gpu_model, record.capacity_type)] += record.gpu_share_7000ths * micros
    idle: dict[tuple[int, str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for (model, ctype), points in capacity.items():
        for hour, gpus in capacity_usage(points, hour_from, hour_to).items():
            used = used_by.get((hour, model, ctype), 0)
            free = max(0, gpus - used)
            row = idle[((hour - hour_from) // step_hours, model, ctype)]
            row[0] += free
            row[1] += GPU.cost_units(free, prices.at(model, ctype, hour)[0])
            row[2] += used
    return [IdleRow(b, m, c, v[0], v[1], v[2]) for (b, m, c), v in idle.items()]
