"""Pure cost arithmetic: windows and steps, exact shares, price segments, allocation assembly, advice.

No Django, no clock, no I/O: callers pass ``now`` and plain values.

Allocation assembly steps (``allocation_assemble``):
1. Rows arrive already summed per (group, step bucket[, GPU model, capacity type]) with exact integer
   usage (GPU 1/7000-µs, CPU milli-µs, memory MiB-µs) and exact cost numerators (usage × price/h).
2. Idle GPU capacity per (bucket, model, capacity type) is capacity minus the allocation of *all*
   tenants, clamped at zero hour by hour by the caller, and arrives priced.
3. Idle is either shown as the group ``__idle__`` or shared: each group receives the idle cost of a
   model in a bucket in proportion to its share of that model's GPU usage in that bucket.
4. Step figures are rounded floats for charts; window totals are computed from the exact sums and
   rounded once (half-even, 6 places), so they equal any exact recomputation.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import NamedTuple

GPU_SHARE_DENOMINATOR = 7000
US_PER_HOUR = 3_600_000_000
GPU_HOUR = GPU_SHARE_DENOMINATOR * US_PER_HOUR  # gpu_usage units in one GPU-hour
CPU_CORE_HOUR = 1000 * US_PER_HOUR  # cpu_milli_us in one core-hour
MEMORY_GIB_HOUR = 1024 * US_PER_HOUR  # memory_mib_us in one GiB-hour
IDLE = "__idle__"
UNALLOCATED = "__unallocated__"
PLACES = 6

CAPACITY_TYPES = ("on-demand", "spot", "reserved")

# Public list prices per GPU-hour, on-demand (hyperscaler GPU instances divided by their GPU count,
# rounded): H100 $10-12 (AWS p5, Azure ND H100 v5), A100-80GB ~$3.7 and A100-40GB ~$3.1 (GCP a2),
# L40S ~$1.9, A10 ~$1.0 (AWS g5), T4 ~$0.53 (AWS g4dn). Admins edit them in the admin.
# Spot is taken at 40 % of on-demand and 1-year reserved at 65 % (issue 6: 30-50 % and 60-70 %).
ON_DEMAND_GPU_USD = {
    "H100-80GB": Decimal("11.00"),
    "H200-141GB": Decimal("13.00"),
    "A100-80GB": Decimal("3.67"),
    "A100-40GB": Decimal("3.06"),
    "L40S": Decimal("1.90"),
    "A10": Decimal("1.00"),
    "T4": Decimal("0.53"),
    "": Decimal("3.00"),  # any other model
}
ON_DEMAND_CPU_CORE_USD = Decimal("0.031611")  # AWS/GCP general-purpose vCPU-hour
ON_DEMAND_MEMORY_GIB_USD = Decimal("0.004237")  # per GiB-hour
CAPACITY_TYPE_FACTOR = {"on-demand": Decimal("1"), "spot": Decimal("0.40"), "reserved": Decimal("0.65")}


@dataclass(frozen=True, slots=True)
class Price:
    resource: str  # gpu, cpu, memory
    gpu_model: str
    capacity_type: str
    effective_from: datetime
    usd_per_hour: Decimal


def price_version(prices: Iterable[Price]) -> str:
    """A fingerprint of the whole price book: any added, removed or changed entry changes it."""
    import hashlib

    items = sorted(
        f"{p.resource}|{p.gpu_model}|{p.capacity_type}|{p.effective_from.timestamp():.0f}|{p.usd_per_hour.normalize()}"
        for p in prices
    )
    return hashlib.sha256("\n".join(items).encode()).hexdigest()


def default_prices(effective_from: datetime) -> list[Price]:
    """The seed price book: every GPU model, CPU and memory at each capacity type."""
    prices = []
    for capacity_type, factor in CAPACITY_TYPE_FACTOR.items():
        for model, usd in ON_DEMAND_GPU_USD.items():
            prices.append(
                Price("gpu", model, capacity_type, effective_from, (usd * factor).quantize(Decimal("0.0001")))
            )
        prices.append(
            Price(
                "cpu",
                "",
                capacity_type,
                effective_from,
                (ON_DEMAND_CPU_CORE_USD * factor).quantize(Decimal("0.000001")),
            )
        )
        prices.append(
            Price(
                "memory",
                "",
                capacity_type,
                effective_from,
                (ON_DEMAND_MEMORY_GIB_USD * factor).quantize(Decimal("0.000001")),
            )
        )
    return prices


# --- exact numbers ---------------------------------------------------------------------------------


def ratio_to_decimal(numerator: int, denominator: int, places: int = PLACES) -> Decimal:
    """``numerator / denominator`` rounded half-even to ``places`` decimals, in integer arithmetic."""
    scaled = numerator * 10**places
    quotient, remainder = divmod(scaled, denominator)
    twice = 2 * remainder
    if twice > denominator or (twice == denominator and quotient % 2 == 1):
        quotient += 1
    return Decimal(quotient).scaleb(-places)


def decimal_units(value: Decimal | int | float | str | None, places: int = PLACES) -> int:
    """A cost numerator (a Decimal with at most ``places`` decimals) as an exact integer of 10^-places."""
    if value is None:
        return 0
    if not isinstance(value, Decimal):
        value = Decimal(str(value))
    return int(value.scaleb(places).to_integral_value())


def gpu_share_7000ths(gpus: Decimal | str | float | int) -> int:
    """GPUs held (shares summed, as recorded at admission with 6 decimals) in 1/7000 GPU.

    Every legal share (n GPUs, k/1000 of one, g/7 MIG slices) is a whole number of 1/7000, and the
    6-decimal rounding of 3/7 (0.428571) is well within half a unit, so rounding recovers it exactly.
    """
    return int((Decimal(str(gpus)) * GPU_SHARE_DENOMINATOR).to_integral_value())


def duration_us(start: datetime, end: datetime) -> int:
    delta = end - start
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def epoch_hour(moment: datetime) -> int:
    return int(moment.timestamp()) // 3600


def hour_start(hour: int) -> datetime:
    return datetime.fromtimestamp(hour * 3600, tz=UTC)


def hour_pieces(start: datetime, end: datetime) -> list[tuple[int, int]]:
    """(epoch hour, microseconds of [start, end) inside it), for every hour the interval touches."""
    pieces = []
    cursor = start
    while cursor < end:
        hour = epoch_hour(cursor)
        boundary = hour_start(hour + 1)
        piece_end = min(boundary, end)
        pieces.append((hour, duration_us(cursor, piece_end)))
        cursor = piece_end
    return pieces


# --- windows and steps -------------------------------------------------------------------------------

DURATION_RE = re.compile(r"^(\d+)([mhdw])$")
UNIT_S = {"m": 60, "h": 3600, "d": 86_400, "w": 604_800}
MAX_WINDOW = timedelta(days=400)


class WindowError(ValueError):
    """A window, step or aggregate the allocation API cannot read; the message says why."""


def parse_duration_s(text: str) -> int:
    match = DURATION_RE.match(text.strip())
    if not match:
        raise WindowError(f"{text!r} is not a duration like 1h, 1d or 7d")
    return int(match.group(1)) * UNIT_S[match.group(2)]


def _parse_instant(text: str) -> datetime:
    text = text.strip().upper()
    if text.isdigit():
        return datetime.fromtimestamp(int(text), tz=UTC)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise WindowError(f"{text!r} is neither an RFC 3339 time nor a Unix timestamp") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _ceil_hour(moment: datetime) -> datetime:
    floored = moment.replace(minute=0, second=0, microsecond=0)
    return floored if floored == moment else floored + timedelta(hours=1)


def _floor_hour(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def month_start(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def next_month(moment: datetime) -> datetime:
    start = month_start(moment)
    return (start + timedelta(days=32)).replace(day=1)


def parse_window(text: str, now: datetime) -> tuple[datetime, datetime]:
    """OpenCost windows, aligned to whole UTC hours: ``7d``, ``24h``, ``today``, ``week``, ``month``,
    ``lastmonth``, or ``start,end`` (RFC 3339 or Unix seconds). Relative windows end at the end of the
    current hour, so usage up to ``now`` is included.
    """
    text = (text or "").strip().lower()
    try:
        start, end = _window_bounds(text, now.astimezone(UTC))
    except WindowError:
        raise
    except (ValueError, OverflowError, OSError):  # a date past what datetime can hold
        raise WindowError(f"{text!r} is not a window between the years 1 and 9999") from None
    if start >= end:
        raise WindowError("the window's start must be before its end")
    if end - start > MAX_WINDOW:
        raise WindowError("windows are limited to 400 days")
    return start, end


def _window_bounds(text: str, now: datetime) -> tuple[datetime, datetime]:
    end = _ceil_hour(now)
    if text in ("", "today"):
        start = now.replace(hour=0, minute=0, second=0, microsecond=0)
    elif text == "yesterday":
        end = now.replace(hour=0, minute=0, second=0, microsecond=0)
        start = end - timedelta(days=1)
    elif text == "week":
        start = now.replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=now.weekday())
    elif text == "month":
        start = month_start(now)
    elif text == "lastmonth":
        end = month_start(now)
        start = month_start(end - timedelta(days=1))
    elif "," in text:
        first, second = text.split(",", 1)
        start, end = (
            _floor_hour(_parse_instant(first).astimezone(UTC)),
            _ceil_hour(_parse_instant(second).astimezone(UTC)),
        )
    else:
        seconds = parse_duration_s(text)
        if seconds < 3600:
            raise WindowError("the shortest window is 1h")
        if seconds > MAX_WINDOW.total_seconds():
            raise WindowError("windows are limited to 400 days")
        start = end - timedelta(seconds=seconds)
    return start, end


def parse_step_hours(text: str | None, window: tuple[datetime, datetime]) -> int:
    """Step in whole hours; none means one step covering the whole window (OpenCost ``accumulate``)."""
    start, end = window
    window_hours = int((end - start).total_seconds()) // 3600
    if not text:
        return window_hours
    seconds = parse_duration_s(text)
    if seconds % 3600:
        raise WindowError("steps are whole hours (1h, 6h, 1d, 1w)")
    hours = seconds // 3600
    if not 1 <= hours <= MAX_WINDOW.days * 24:
        raise WindowError("steps are between 1h and 400 days")
    if math.ceil(window_hours / hours) > 10_000:
        raise WindowError("too many steps: use a longer step or a shorter window")
    return hours


def step_windows(start: datetime, end: datetime, step_hours: int) -> list[tuple[datetime, datetime]]:
    windows = []
    cursor = start
    while cursor < end:
        nxt = cursor + min(timedelta(hours=step_hours), end - cursor)  # never past ``end``: no overflow near year 9999
        windows.append((cursor, nxt))
        cursor = nxt
    return windows


AGGREGATES = ("namespace", "team", "queue", "cluster_queue", "job", "gpu_model", "capacity_type")


def parse_aggregate(text: str | None) -> str:
    text = (text or "namespace").strip()
    if text.startswith("label:"):
        key = text.removeprefix("label:")
        if not key or len(key) > 317:
            raise WindowError("label aggregation needs a key: label:<key>")
        return text
    if text not in AGGREGATES:
        raise WindowError(f"aggregate must be one of {', '.join(AGGREGATES)} or label:<key>")
    return text


def parse_bool(text: str | None, default: bool) -> bool:
    if text is None or text == "":
        return default
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes"):
        return True
    if lowered in ("0", "false", "no"):
        return False
    raise WindowError(f"{text!r} is not true or false")


# --- prices over time ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PriceSegment:
    """Prices of one (GPU model, capacity type) over epoch hours [hour_from, hour_to)."""

    gpu_model: str
    capacity_type: str
    hour_from: int
    hour_to: int
    gpu_usd: Decimal
    cpu_usd: Decimal
    memory_usd: Decimal


def _price_at(entries: Sequence[Price], hour: int) -> Decimal | None:
    """The price in force at an hour: the newest entry effective at or before the hour's start."""
    best = None
    for entry in entries:
        if epoch_hour(entry.effective_from) <= hour and (best is None or entry.effective_from > best.effective_from):
            best = entry
    return best.usd_per_hour if best else None


def price_segments(
    prices: Iterable[Price], gpu_models: Iterable[str], hour_from: int, hour_to: int
) -> list[PriceSegment]:
    """Piecewise-constant prices for each (model, capacity type) over [hour_from, hour_to).

    A price takes effect from the hour its ``effective_from`` falls in. A GPU model without entries is
    priced by the fallback entries with an empty model; a missing price is zero.
    """
    by_item: dict[tuple[str, str, str], list[Price]] = {}
    for price in prices:
        by_item.setdefault((price.resource, price.gpu_model, price.capacity_type), []).append(price)
    segments = []
    for model in sorted(set(gpu_models) | {""}):
        for capacity_type in CAPACITY_TYPES:
            # The "" model is both CPU-only usage (no GPU usage, so its GPU price never counts) and the
            # fallback for GPU models without entries of their own.
            gpu = by_item.get(("gpu", model, capacity_type)) or by_item.get(("gpu", "", capacity_type)) or []
            cpu = by_item.get(("cpu", "", capacity_type), [])
            memory = by_item.get(("memory", "", capacity_type), [])
            changes = sorted(
                {hour_from}
                | {
                    epoch_hour(p.effective_from)
                    for p in (*gpu, *cpu, *memory)
                    if hour_from < epoch_hour(p.effective_from) < hour_to
                }
            )
            for index, start in enumerate(changes):
                end = changes[index + 1] if index + 1 < len(changes) else hour_to
                segments.append(
                    PriceSegment(
                        model,
                        capacity_type,
                        start,
                        end,
                        _price_at(gpu, start) or Decimal(0),
                        _price_at(cpu, start) or Decimal(0),
                        _price_at(memory, start) or Decimal(0),
                    )
                )
    return segments


class PriceLookup:
    """Prices by (model, capacity type, epoch hour), from segments; cached per key and hour."""

    def __init__(self, segments: Iterable[PriceSegment]) -> None:
        self._segments: dict[tuple[str, str], list[PriceSegment]] = {}
        for segment in segments:
            self._segments.setdefault((segment.gpu_model, segment.capacity_type), []).append(segment)
        self._cache: dict[tuple[str, str, int], tuple[Decimal, Decimal, Decimal]] = {}

    def at(self, gpu_model: str, capacity_type: str, hour: int) -> tuple[Decimal, Decimal, Decimal]:
        """(GPU, CPU core, memory GiB) USD per hour; models without segments use the fallback ones."""
        key = (gpu_model, capacity_type, hour)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        found = (Decimal(0), Decimal(0), Decimal(0))
        segments = self._segments.get((gpu_model, capacity_type)) or self._segments.get(("", capacity_type), [])
        for segment in segments:
            if segment.hour_from <= hour < segment.hour_to:
                found = (segment.gpu_usd, segment.cpu_usd, segment.memory_usd)
                break
        self._cache[key] = found
        return found


# --- allocation ------------------------------------------------------------------------------------------


@dataclass(slots=True)
class UsageSums:
    """Exact sums for one group in one bucket (and, for idle sharing, one model and capacity type)."""

    gpu_usage: int = 0  # 1/7000 GPU × µs
    gpu_cost_units: int = 0  # Σ gpu_usage × USD/h, in 10^-6
    cpu_milli_us: int = 0
    cpu_cost_units: int = 0
    memory_mib_us: int = 0
    memory_cost_units: int = 0
    util_usage: int = 0  # Σ utilization % × gpu_usage, over measured usage
    util_measured_usage: int = 0
    shared_idle_cost: Fraction = field(default_factory=Fraction)

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


class Figures(NamedTuple):
    """What the API reports for one group over one window: exact Decimals for window totals, floats
    for step figures. A named tuple, not a dataclass: a 30-day hourly result builds 10^5 of them.
    """

    gpu_hours: Decimal | float
    gpu_cost: Decimal | float
    cpu_core_hours: Decimal | float
    cpu_cost: Decimal | float
    ram_gib_hours: Decimal | float
    ram_cost: Decimal | float
    shared_idle_cost: Decimal | float
    total_cost: Decimal | float
    gpu_efficiency: float | None  # GPU-usage-weighted utilization, 0..1; None when never measured

    def as_dict(self) -> dict:
        return {
            "gpuHours": self.gpu_hours,
            "gpuCost": self.gpu_cost,
            "cpuCoreHours": self.cpu_core_hours,
            "cpuCost": self.cpu_cost,
            "ramGiBHours": self.ram_gib_hours,
            "ramCost": self.ram_cost,
            "sharedIdleCost": self.shared_idle_cost,
            "totalCost": self.total_cost,
            "gpuEfficiency": self.gpu_efficiency,
        }


def figures_exact(sums: UsageSums) -> Figures:
    gpu_cost = ratio_to_decimal(sums.gpu_cost_units, GPU_HOUR * 10**PLACES)
    cpu_cost = ratio_to_decimal(sums.cpu_cost_units, CPU_CORE_HOUR * 10**PLACES)
    ram_cost = ratio_to_decimal(sums.memory_cost_units, MEMORY_GIB_HOUR * 10**PLACES)
    idle = sums.shared_idle_cost
    shared = ratio_to_decimal(idle.numerator, idle.denominator)
    total_exact = (
        Fraction(sums.gpu_cost_units, GPU_HOUR * 10**PLACES)
        + Fraction(sums.cpu_cost_units, CPU_CORE_HOUR * 10**PLACES)
        + Fraction(sums.memory_cost_units, MEMORY_GIB_HOUR * 10**PLACES)
        + idle
    )
    return Figures(
        gpu_hours=ratio_to_decimal(sums.gpu_usage, GPU_HOUR),
        gpu_cost=gpu_cost,
        cpu_core_hours=ratio_to_decimal(sums.cpu_milli_us, CPU_CORE_HOUR),
        cpu_cost=cpu_cost,
        ram_gib_hours=ratio_to_decimal(sums.memory_mib_us, MEMORY_GIB_HOUR),
        ram_cost=ram_cost,
        shared_idle_cost=shared,
        total_cost=ratio_to_decimal(total_exact.numerator, total_exact.denominator),
        gpu_efficiency=(
            round(sums.util_usage / sums.util_measured_usage / 100, 4) if sums.util_measured_usage else None
        ),
    )


@dataclass(frozen=True, slots=True)
class Allocation:
    """Per step, group → figures; and group → figures over the whole window."""

    start: datetime
    end: datetime
    step_hours: int
    aggregate: str
    steps: list[tuple[datetime, datetime, dict[str, Figures]]]
    totals: dict[str, Figures]
    idle_by_model: dict[str, Figures] = field(default_factory=dict)  # GPU model → idle over the window


def idle_by_model(idle_rows: Iterable[IdleRow]) -> dict[str, Figures]:
    """Idle GPU-hours and cost per GPU model over the window (every capacity type together)."""
    sums: dict[str, UsageSums] = {}
    for idle in idle_rows:
        row = sums.setdefault(idle.gpu_model, UsageSums())
        row.gpu_usage += idle.idle_usage
        row.gpu_cost_units += idle.idle_cost_units
    return {model: figures_exact(s) for model, s in sorted(sums.items())}


def allocation_assemble(
    *,
    rows: Iterable[UsageRow],
    idle_rows: Sequence[IdleRow],
    windows: Sequence[tuple[datetime, datetime]],
    aggregate: str,
    step_hours: int,
    show_idle: bool,
    share_idle: bool,
) -> Allocation:
    """Combine summed usage rows and idle rows into an Allocation (see the module docstring)."""
    per_step: dict[tuple[str, int], UsageSums] = {}
    per_group: dict[str, UsageSums] = {}
    usage_by_model: dict[tuple[int, str, str], list[tuple[str, int]]] = {}
    for row in rows:
        sums = per_step.get((row.group, row.bucket))
        if sums is None:
            sums = per_step[(row.group, row.bucket)] = UsageSums()
        sums.add(row.sums)
        if share_idle and row.sums.gpu_usage:
            usage_by_model.setdefault((row.bucket, row.gpu_model, row.capacity_type), []).append(
                (row.group, row.sums.gpu_usage)
            )
    for idle in idle_rows:
        if share_idle:
            takers = usage_by_model.get((idle.bucket, idle.gpu_model, idle.capacity_type), [])
            if idle.allocated_usage and takers:
                cost = Fraction(idle.idle_cost_units, GPU_HOUR * 10**PLACES)
                for group, usage in takers:
                    per_step[(group, idle.bucket)].shared_idle_cost += cost * usage / idle.allocated_usage
        if show_idle and not share_idle:
            sums = per_step.get((IDLE, idle.bucket))
            if sums is None:
                sums = per_step[(IDLE, idle.bucket)] = UsageSums()
            sums.gpu_usage += idle.idle_usage
            sums.gpu_cost_units += idle.idle_cost_units
    step_figures: list[dict[str, Figures]] = [{} for _ in windows]
    for (group, bucket), sums in per_step.items():
        total = per_group.get(group)
        if total is None:
            total = per_group[group] = UsageSums()
        total.add(sums)
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


def figures_fast(sums: UsageSums) -> Figures:
    """Step figures: the same sums, rounded through floats (charts; totals use ``figures_exact``)."""
    gpu_cost = sums.gpu_cost_units / (GPU_HOUR * 1e6)
    cpu_cost = sums.cpu_cost_units / (CPU_CORE_HOUR * 1e6)
    ram_cost = sums.memory_cost_units / (MEMORY_GIB_HOUR * 1e6)
    shared = float(sums.shared_idle_cost)
    return Figures(
        gpu_hours=round(sums.gpu_usage / GPU_HOUR, PLACES),
        gpu_cost=round(gpu_cost, PLACES),
        cpu_core_hours=round(sums.cpu_milli_us / CPU_CORE_HOUR, PLACES),
        cpu_cost=round(cpu_cost, PLACES),
        ram_gib_hours=round(sums.memory_mib_us / MEMORY_GIB_HOUR, PLACES),
        ram_cost=round(ram_cost, PLACES),
        shared_idle_cost=round(shared, PLACES),
        total_cost=round(gpu_cost + cpu_cost + ram_cost + shared, PLACES),
        gpu_efficiency=(
            round(sums.util_usage / sums.util_measured_usage / 100, 4) if sums.util_measured_usage else None
        ),
    )


StepFloats = tuple[float, float, float, float, float, float, float, float]
"""gpu_hours, gpu_cost, cpu_core_hours, cpu_cost, ram_gib_hours, ram_cost, util-weighted usage, measured usage"""


def _floats(sums: UsageSums) -> StepFloats:
    return (
        sums.gpu_usage / GPU_HOUR,
        sums.gpu_cost_units / (GPU_HOUR * 1e6),
        sums.cpu_milli_us / CPU_CORE_HOUR,
        sums.cpu_cost_units / (CPU_CORE_HOUR * 1e6),
        sums.memory_mib_us / MEMORY_GIB_HOUR,
        sums.memory_cost_units / (MEMORY_GIB_HOUR * 1e6),
        float(sums.util_usage),
        float(sums.util_measured_usage),
    )


def allocation_assemble_fast(
    *,
    step_rows: Iterable[tuple],
    totals: dict[str, UsageSums],
    extra_rows: Iterable[UsageRow],
    idle_rows: Sequence[IdleRow],
    windows: Sequence[tuple[datetime, datetime]],
    aggregate: str,
    step_hours: int,
    show_idle: bool,
    group_names: dict | None = None,
) -> Allocation:
    """``allocation_assemble`` without idle sharing, for large results: step rows arrive as
    ``(group, bucket, *Figures fields)`` in floating point (summed and priced by the database), window
    totals as exact sums. ``extra_rows`` (running jobs' open intervals) and idle rows are added to both.
    With ``group_names``, a row's group is a key into it (e.g. a team id) rather than the name.

    Step figures stay unrounded floats: rounding 72,000 steps × 8 figures costs more than the query.
    """
    step_figures: list[dict[str, Figures]] = [{} for _ in windows]
    count = len(step_figures)
    new = tuple.__new__  # Figures._make without its length check: the rows come in Figures' shape
    if group_names is None:
        for row in step_rows:
            if 0 <= row[1] < count:
                step_figures[row[1]][row[0]] = new(Figures, row[2:])
    else:
        for row in step_rows:
            if 0 <= row[1] < count:
                step_figures[row[1]][group_names[row[0]]] = new(Figures, row[2:])

    def merge(group: str, bucket: int, sums: UsageSums) -> None:
        if not 0 <= bucket < count:
            return
        gh, gc, ch, cc, rh, rc, uw, um = _floats(sums)
        old = step_figures[bucket].get(group)
        if old is not None:
            gh, gc, ch, cc = gh + old.gpu_hours, gc + old.gpu_cost, ch + old.cpu_core_hours, cc + old.cpu_cost
            rh, rc = rh + old.ram_gib_hours, rc + old.ram_cost
        efficiency = (uw / um / 100) if um else (old.gpu_efficiency if old is not None else None)
        step_figures[bucket][group] = Figures(gh, gc, ch, cc, rh, rc, 0.0, gc + cc + rc, efficiency)

    for row in extra_rows:
        merge(row.group, row.bucket, row.sums)
        totals.setdefault(row.group, UsageSums()).add(row.sums)
    if show_idle:
        for idle in idle_rows:
            sums = UsageSums(gpu_usage=idle.idle_usage, gpu_cost_units=idle.idle_cost_units)
            merge(IDLE, idle.bucket, sums)
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


def _epoch_us(moment: datetime) -> int:
    return duration_us(EPOCH, moment)


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def capacity_usage(changes: Sequence[tuple[datetime, int]], hour_from: int, hour_to: int) -> dict[int, int]:
    """GPU capacity per epoch hour in 1/7000-GPU-µs from (time, GPU count) change points.

    A count holds from its time until the next change; before the first change nothing is known (0).
    Integer arithmetic on epoch microseconds: a month of hours for every model costs next to nothing.
    """
    out: dict[int, int] = {}
    ordered = sorted(changes)
    lo, hi = hour_from * US_PER_HOUR, hour_to * US_PER_HOUR
    for index, (at, count) in enumerate(ordered):
        until = _epoch_us(ordered[index + 1][0]) if index + 1 < len(ordered) else hi
        start, end = max(_epoch_us(at), lo), min(until, hi)
        if count <= 0 or start >= end:
            continue
        weight = count * GPU_SHARE_DENOMINATOR
        hour = start // US_PER_HOUR
        while start < end:
            boundary = min((hour + 1) * US_PER_HOUR, end)
            out[hour] = out.get(hour, 0) + weight * (boundary - start)
            start, hour = boundary, hour + 1
    return out


# --- efficiency advice ----------------------------------------------------------------------------------

LOW_UTILIZATION_PCT = 30.0
HIGH_UTILIZATION_PCT = 90.0


def recommendation(*, util_pct: float | None, gpus_per_replica: float, mig_profile: str = "") -> str:
    """Advice for a job from its average GPU utilization (empty when it is sized about right)."""
    if util_pct is None or gpus_per_replica <= 0:
        return ""
    if util_pct < LOW_UTILIZATION_PCT:
        if gpus_per_replica >= 2:
            fewer = max(1, math.ceil(gpus_per_replica * util_pct / 70))
            return (
                f"{util_pct:.0f} % average GPU utilization: request {fewer} GPU(s) instead of "
                f"{gpus_per_replica:g}, or a smaller GPU model"
            )
        if gpus_per_replica >= 1:
            return (
                f"{util_pct:.0f} % average GPU utilization: a fraction (gpu_milli 500 or less), "
                "a MIG slice such as 3g.40gb, or a smaller GPU model would do"
            )
        what = f"MIG {mig_profile}" if mig_profile else f"{gpus_per_replica:g} GPU"
        return f"{util_pct:.0f} % average GPU utilization: a smaller share than {what} would do"
    if util_pct > HIGH_UTILIZATION_PCT:
        return (
            f"{util_pct:.0f} % average GPU utilization: the job is GPU-bound; more GPUs, a larger share "
            "or a faster GPU model would shorten it"
        )
    return ""


def team_recommendation(*, util_pct: float | None) -> str:
    if util_pct is None:
        return ""
    if util_pct < LOW_UTILIZATION_PCT:
        return (
            f"{util_pct:.0f} % average GPU utilization across the team: the jobs listed below could use "
            "fewer or smaller GPUs, fractions or MIG slices"
        )
    if util_pct > HIGH_UTILIZATION_PCT:
        return f"{util_pct:.0f} % average GPU utilization: the team's jobs are GPU-bound and could use more"
    return ""


# --- budgets -------------------------------------------------------------------------------------------------

ALERT_THRESHOLDS_PCT = (80, 100)


def thresholds_crossed(*, spend_usd: Decimal, budget_usd: Decimal) -> list[int]:
    """Alert thresholds (percent of the budget) that ``spend_usd`` has reached."""
    if budget_usd <= 0:
        return list(ALERT_THRESHOLDS_PCT) if spend_usd > 0 else []
    return [pct for pct in ALERT_THRESHOLDS_PCT if spend_usd * 100 >= budget_usd * pct]
