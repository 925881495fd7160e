"""Cost allocation assembly: exact sums, the figures reported for them, and an allocation's steps and
totals.

Steps of ``allocation_assemble``:
1. Rows arrive already summed per (group, step bucket[, GPU model, capacity type]) with exact integer
   usage (GPU 1/7000-µs, CPU milli-µs, memory MiB-µs) and exact cost numerators (``units.Meter``).
2. Idle GPU capacity per (bucket, model, capacity type) is capacity minus the allocation of *all*
   tenants, clamped at zero hour by hour by the caller, and arrives priced.
3. Idle is either shown as the group ``__idle__`` or shared: each group receives the idle cost of a
   model in a bucket in proportion to its share of that model's GPU usage in that bucket.
4. Step figures are floats for charts (``StepFigures``); window totals are computed from the exact
   sums and rounded once (half-even, 6 places) into ``Figures`` of Decimals, so they equal any exact
   recomputation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from fractions import Fraction
from typing import Any, NamedTuple

from billing.core.units import CPU, GPU, MEMORY, PLACES, ratio_to_decimal
from billing.core.windows import Window

IDLE = "__idle__"
UNALLOCATED = "__unallocated__"


@dataclass(frozen=True, slots=True)
class AllocationQuery:
    """What an allocation is asked for: an hour-aligned window cut into steps, grouped by ``aggregate``."""

    start: datetime
    end: datetime
    step_hours: int
    aggregate: str = "namespace"
    show_idle: bool = True
    share_idle: bool = False
    team_ids: frozenset[int] | None = None  # None: every team (platform admins)
    include_running: bool = True


@dataclass(slots=True)
class UsageSums:
    """Exact sums for one group in one bucket (and, for idle sharing, one model and capacity type)."""

    gpu_usage: int = 0  # 1/7000 GPU × µs
    gpu_cost_units: int = 0  # Σ gpu_usage × USD/h, in 10^-6
    cpu_milli_us: int = 0
    cpu_cost_units: int = 0
    memory_mib_us: int = 0
    memory_cost_units: int = 0
    util_usage: float = 0  # Σ utilization % × gpu_usage over measured usage (a weight, not money)
    util_measured_usage: int = 0
    shared_idle_cost: Fraction = field(default_factory=Fraction)  # USD

    def add(self, other: UsageSums) -> None:
        self.gpu_usage += other.gpu_usage
        self.gpu_cost_units += other.gpu_cost_units
        self.cpu_milli_us += other.cpu_milli_us
        self.cpu_cost_units += other.cpu_cost_units
        self.memory_mib_us += other.memory_mib_us
        self.memory_cost_units += other.memory_cost_units
        self.util_usage += other.util_usage
        self.util_measured_usage += other.util_measured_usage
        self.shared_idle_cost += other.shared_idle_cost


@dataclass(frozen=True, slots=True)
class UsageRow:
    """One summed row from the database: a group in a bucket, optionally split by model and type."""

    group: str
    bucket: int
    gpu_model: str
    capacity_type: str
    sums: UsageSums


@dataclass(frozen=True, slots=True)
class IdleRow:
    """Idle GPU capacity of one model and capacity type in one bucket, priced hour by hour."""

    bucket: int
    gpu_model: str
    capacity_type: str
    idle_usage: int  # 1/7000 GPU × µs
    idle_cost_units: int  # Σ idle × USD/h, 10^-6
    allocated_usage: int  # all tenants' GPU usage of the model in the bucket


def _efficiency(util_usage: float, measured_usage: float) -> float | None:
    """GPU-usage-weighted utilization, 0..1, 4 decimals; None when nothing was measured."""
    return round(util_usage / measured_usage / 100, 4) if measured_usage else None


class Figures(NamedTuple):
    """What the API reports for one group over a whole window: exact amounts, rounded once."""

    gpu_hours: Decimal
    gpu_cost: Decimal
    cpu_core_hours: Decimal
    cpu_cost: Decimal
    ram_gib_hours: Decimal
    ram_cost: Decimal
    shared_idle_cost: Decimal
    total_cost: Decimal
    gpu_efficiency: float | None  # GPU-usage-weighted utilization, 0..1; None when never measured

    def as_dict(self) -> dict[str, Decimal | float | None]:
        return _as_dict(self)


ZERO = Figures(*(Decimal(0),) * 8, None)


class StepFigures(NamedTuple):
    """The same figures for one group in one step, as floats: chart data, summed by the database in
    floating point (totals use ``Figures``). A named tuple, not a dataclass: a 30-day hourly result
    builds 10^5 of them."""

    gpu_hours: float
    gpu_cost: float
    cpu_core_hours: float
    cpu_cost: float
    ram_gib_hours: float
    ram_cost: float
    shared_idle_cost: float
    total_cost: float
    gpu_efficiency: float | None

    def as_dict(self) -> dict[str, Decimal | float | None]:
        return _as_dict(self)


def _as_dict(f: Figures | StepFigures) -> dict[str, Decimal | float | None]:
    return {
        "gpuHours": f.gpu_hours,
        "gpuCost": f.gpu_cost,
        "cpuCoreHours": f.cpu_core_hours,
        "cpuCost": f.cpu_cost,
        "ramGiBHours": f.ram_gib_hours,
        "ramCost": f.ram_cost,
        "sharedIdleCost": f.shared_idle_cost,
        "totalCost": f.total_cost,
        "gpuEfficiency": f.gpu_efficiency,
    }


def figures_exact(sums: UsageSums) -> Figures:
    idle = sums.shared_idle_cost
    total_exact = (
        GPU.cost_fraction(sums.gpu_cost_units)
        + CPU.cost_fraction(sums.cpu_cost_units)
        + MEMORY.cost_fraction(sums.memory_cost_units)
        + idle
    )
    return Figures(
        gpu_hours=GPU.hours(sums.gpu_usage),
        gpu_cost=GPU.cost_usd(sums.gpu_cost_units),
        cpu_core_hours=CPU.hours(sums.cpu_milli_us),
        cpu_cost=CPU.cost_usd(sums.cpu_cost_units),
        ram_gib_hours=MEMORY.hours(sums.memory_mib_us),
        ram_cost=MEMORY.cost_usd(sums.memory_cost_units),
        shared_idle_cost=ratio_to_decimal(idle.numerator, idle.denominator),
        total_cost=ratio_to_decimal(total_exact.numerator, total_exact.denominator),
        gpu_efficiency=_efficiency(sums.util_usage, sums.util_measured_usage),
    )


def figures_fast(sums: UsageSums) -> StepFigures:
    """Step figures: the same sums, rounded through floats (charts; totals use ``figures_exact``)."""
    gpu_cost = GPU.cost_float(sums.gpu_cost_units)
    cpu_cost = CPU.cost_float(sums.cpu_cost_units)
    ram_cost = MEMORY.cost_float(sums.memory_cost_units)
    shared = float(sums.shared_idle_cost)
    return StepFigures(
        gpu_hours=round(GPU.hours_float(sums.gpu_usage), PLACES),
        gpu_cost=round(gpu_cost, PLACES),
        cpu_core_hours=round(CPU.hours_float(sums.cpu_milli_us), PLACES),
        cpu_cost=round(cpu_cost, PLACES),
        ram_gib_hours=round(MEMORY.hours_float(sums.memory_mib_us), PLACES),
        ram_cost=round(ram_cost, PLACES),
        shared_idle_cost=round(shared, PLACES),
        total_cost=round(gpu_cost + cpu_cost + ram_cost + shared, PLACES),
        gpu_efficiency=_efficiency(sums.util_usage, sums.util_measured_usage),
    )


@dataclass(frozen=True, slots=True)
class Allocation:
    """Per step, group → chart figures; and group → exact figures over the whole window."""

    start: datetime
    end: datetime
    step_hours: int
    aggregate: str
    steps: list[tuple[datetime, datetime, dict[str, StepFigures]]]
    totals: dict[str, Figures]
    idle_by_model: dict[str, Figures] = field(default_factory=dict)  # GPU model → idle over the window

    def group_totals(self) -> dict[str, Figures]:
        """Window totals of the groups, without ``__idle__``."""
        return {name: f for name, f in self.totals.items() if name != IDLE}


def idle_by_model(idle_rows: Iterable[IdleRow]) -> dict[str, Figures]:
    """Idle GPU-hours and cost per GPU model over the window (every capacity type together)."""
    sums: dict[str, UsageSums] = {}
    for idle in idle_rows:
        row = sums.setdefault(idle.gpu_model, UsageSums())
        row.gpu_usage += idle.idle_usage
        row.gpu_cost_units += idle.idle_cost_units
    return {model: figures_exact(s) for model, s in sorted(sums.items())}


def _sums_of(table: dict[Any, UsageSums], key: Any) -> UsageSums:
    sums = table.get(key)
    if sums is None:
        sums = table[key] = UsageSums()
    return sums


def allocation_assemble(
    *,
    rows: Iterable[UsageRow],
    idle_rows: Sequence[IdleRow],
    windows: Sequence[Window],
    aggregate: str,
    step_hours: int,
    show_idle: bool,
    share_idle: bool,
) -> Allocation:
    """Combine summed usage rows and idle rows into an Allocation (see the module docstring)."""
    per_step: dict[tuple[str, int], UsageSums] = {}
    usage_by_model: dict[tuple[int, str, str], list[tuple[str, int]]] = {}
    for row in rows:
        _sums_of(per_step, (row.group, row.bucket)).add(row.sums)
        if share_idle and row.sums.gpu_usage:
            usage_by_model.setdefault((row.bucket, row.gpu_model, row.capacity_type), []).append(
                (row.group, row.sums.gpu_usage)
            )
    for idle in idle_rows:
        if share_idle:
            takers = usage_by_model.get((idle.bucket, idle.gpu_model, idle.capacity_type), [])
            if idle.allocated_usage and takers:
                cost = GPU.cost_fraction(idle.idle_cost_units)
                for group, usage in takers:
                    per_step[(group, idle.bucket)].shared_idle_cost += cost * usage / idle.allocated_usage
        if show_idle and not share_idle:
            sums = _sums_of(per_step, (IDLE, idle.bucket))
            sums.gpu_usage += idle.idle_usage
            sums.gpu_cost_units += idle.idle_cost_units
    per_group: dict[str, UsageSums] = {}
    step_figures: list[dict[str, StepFigures]] = [{} for _ in windows]
    for (group, bucket), sums in per_step.items():
        _sums_of(per_group, group).add(sums)
        if 0 <= bucket < len(windows):
            step_figures[bucket][group] = figures_fast(sums)
    return Allocation(
        start=windows[0][0],
        end=windows[-1][1],
        step_hours=step_hours,
        aggregate=aggregate,
        steps=[(w[0], w[1], dict(sorted(f.items()))) for w, f in zip(windows, step_figures, strict=True)],
        totals={group: figures_exact(sums) for group, sums in sorted(per_group.items())},
        idle_by_model=idle_by_model(idle_rows) if show_idle else {},
    )


StepRow = Sequence[Any]
"""``(group or group key, bucket, *StepFigures fields)`` as the database returns it."""


def _step_floats(sums: UsageSums) -> tuple[float, float, float, float, float, float, float, float]:
    """gpu_hours, gpu_cost, cpu_core_hours, cpu_cost, ram_gib_hours, ram_cost, util-weighted usage,
    measured usage: unrounded."""
    return (
        GPU.hours_float(sums.gpu_usage),
        GPU.cost_float(sums.gpu_cost_units),
        CPU.hours_float(sums.cpu_milli_us),
        CPU.cost_float(sums.cpu_cost_units),
        MEMORY.hours_float(sums.memory_mib_us),
        MEMORY.cost_float(sums.memory_cost_units),
        float(sums.util_usage),
        float(sums.util_measured_usage),
    )


def _step_figures_from_rows(
    step_rows: Iterable[StepRow], count: int, group_names: Mapping[Any, str] | None
) -> list[dict[str, StepFigures]]:
    step_figures: list[dict[str, StepFigures]] = [{} for _ in range(count)]
    new = tuple.__new__  # StepFigures._make without its length check: the rows come in its shape
    if group_names is None:
        for row in step_rows:
            if 0 <= row[1] < count:
                step_figures[row[1]][row[0]] = new(StepFigures, row[2:])
    else:
        for row in step_rows:
            if 0 <= row[1] < count:
                step_figures[row[1]][group_names[row[0]]] = new(StepFigures, row[2:])
    return step_figures


def _merge_step(step_figures: list[dict[str, StepFigures]], group: str, bucket: int, sums: UsageSums) -> None:
    """Add exact sums to a group's floating-point figures of one step."""
    if not 0 <= bucket < len(step_figures):
        return
    gh, gc, ch, cc, rh, rc, uw, um = _step_floats(sums)
    old = step_figures[bucket].get(group)
    if old is not None:
        gh, gc, ch, cc = gh + old.gpu_hours, gc + old.gpu_cost, ch + old.cpu_core_hours, cc + old.cpu_cost
        rh, rc = rh + old.ram_gib_hours, rc + old.ram_cost
    efficiency = (uw / um / 100) if um else (old.gpu_efficiency if old is not None else None)
    step_figures[bucket][group] = StepFigures(gh, gc, ch, cc, rh, rc, 0.0, gc + cc + rc, efficiency)


def allocation_assemble_fast(
    *,
    step_rows: Iterable[StepRow],
    totals: dict[str, UsageSums],
    extra_rows: Iterable[UsageRow],
    idle_rows: Sequence[IdleRow],
    windows: Sequence[Window],
    aggregate: str,
    step_hours: int,
    show_idle: bool,
    group_names: Mapping[Any, str] | None = None,
) -> Allocation:
    """``allocation_assemble`` without idle sharing, for large results: step rows arrive as
    ``(group, bucket, *StepFigures fields)`` in floating point (summed and priced by the database),
    window totals as exact sums. ``extra_rows`` (running jobs' open intervals) and idle rows are added
    to both. With ``group_names``, a row's group is a key into it (e.g. a team id) rather than the name.

    Step figures stay unrounded floats: rounding 72,000 steps × 8 figures costs more than the query.
    """
    step_figures = _step_figures_from_rows(step_rows, len(windows), group_names)
    for row in extra_rows:
        _merge_step(step_figures, row.group, row.bucket, row.sums)
        totals.setdefault(row.group, UsageSums()).add(row.sums)
    if show_idle:
        for idle in idle_rows:
            sums = UsageSums(gpu_usage=idle.idle_usage, gpu_cost_units=idle.idle_cost_units)
            _merge_step(step_figures, IDLE, idle.bucket, sums)
            totals.setdefault(IDLE, UsageSums()).add(sums)
    return Allocation(
        start=windows[0][0],
        end=windows[-1][1],
        step_hours=step_hours,
        aggregate=aggregate,
        steps=[(w[0], w[1], f) for w, f in zip(windows, step_figures, strict=True)],
        totals={group: figures_exact(sums) for group, sums in sorted(totals.items())},
        idle_by_model=idle_by_model(idle_rows) if show_idle else {},
    )
