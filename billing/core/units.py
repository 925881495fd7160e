"""Exact integer units, the cost formula, and time pieces.

Every usage figure is an integer, so sums never round:

* GPU usage: billed share in 1/7000 GPU (``scheduling.engine.shares.BILLED_UNITS_PER_GPU``) × µs;
* CPU usage: milli-cores × µs; memory usage: MiB × µs;
* prices and cost numerators: 10^-6 USD (``COST_SCALE``; a price has at most 6 decimals).

The cost formula, defined here once (``billing.sql`` builds its SQL expressions from the same
``Meter`` constants): a resource's *cost numerator* is ``usage × price_units(USD per hour)``; its cost
in USD is the numerator divided by ``usage_per_hour × COST_SCALE``, rounded once, half-even, to
``PLACES`` decimals for totals, or divided in floating point for chart figures.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction

from scheduling.engine.shares import BILLED_UNITS_PER_GPU

US_PER_HOUR = 3_600_000_000
PLACES = 6  # decimals of prices, of cost numerators' unit (10^-6 USD) and of reported figures
COST_SCALE = 10**PLACES
GPU_HOUR = BILLED_UNITS_PER_GPU * US_PER_HOUR  # gpu_usage units in one GPU-hour
CPU_CORE_HOUR = 1000 * US_PER_HOUR  # cpu_milli_us in one core-hour
MEMORY_GIB_HOUR = 1024 * US_PER_HOUR  # memory_mib_us in one GiB-hour
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def ratio_to_decimal(numerator: int, denominator: int, places: int = PLACES) -> Decimal:
    """``numerator / denominator`` rounded half-even to ``places`` decimals, in integer arithmetic."""
    scaled = numerator * 10**places
    quotient, remainder = divmod(scaled, denominator)
    twice = 2 * remainder
    if twice > denominator or (twice == denominator and quotient % 2 == 1):
        quotient += 1
    return Decimal(quotient).scaleb(-places)


def decimal_units(value: Decimal | int | float | str | None, places: int = PLACES) -> int:
    """A price or a cost numerator (a Decimal with at most ``places`` decimals) as an exact integer of
    10^-places; ``None`` is 0."""
    if value is None:
        return 0
    if not isinstance(value, Decimal):
        value = Decimal(str(value))
    return int(value.scaleb(places).to_integral_value())


@dataclass(frozen=True, slots=True)
class Meter:
    """One priced resource: the price book's ``resource`` and how many usage units one priced hour
    holds (a GPU-hour, a core-hour, a GiB-hour). The cost formula lives in its methods."""

    resource: str
    usage_per_hour: int

    @property
    def cost_denominator(self) -> int:
        """What a cost numerator is divided by to give USD."""
        return self.usage_per_hour * COST_SCALE

    def cost_units(self, usage: int, usd_per_hour: Decimal) -> int:
        """The exact cost numerator of ``usage`` at a price: usage × price in 10^-6 USD."""
        return usage * decimal_units(usd_per_hour)

    def cost_usd(self, cost_units: int) -> Decimal:
        """A cost numerator in USD, rounded once (half-even, ``PLACES`` decimals)."""
        return ratio_to_decimal(cost_units, self.cost_denominator)

    def cost_fraction(self, cost_units: int) -> Fraction:
        return Fraction(cost_units, self.cost_denominator)

    def cost_float(self, cost_units: int) -> float:
        """A cost numerator in USD as a float (chart figures)."""
        return cost_units / (self.usage_per_hour * 1e6)

    def hours_float(self, usage: int) -> float:
        """Usage in priced hours as a float (chart figures)."""
        return usage / self.usage_per_hour

    def hours(self, usage: int, places: int = PLACES) -> Decimal:
        """Usage in priced hours (GPU-hours, core-hours, GiB-hours), rounded once."""
        return ratio_to_decimal(usage, self.usage_per_hour, places)


GPU = Meter("gpu", GPU_HOUR)
CPU = Meter("cpu", CPU_CORE_HOUR)
MEMORY = Meter("memory", MEMORY_GIB_HOUR)
METERS = (GPU, CPU, MEMORY)


def duration_us(start: datetime, end: datetime) -> int:
    delta = end - start
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def epoch_us(moment: datetime) -> int:
    return duration_us(EPOCH, moment)


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


def hours_between(start: datetime, end: datetime) -> int:
    """Whole hours from ``start`` to ``end`` (both on hour boundaries in practice)."""
    return int((end - start).total_seconds()) // 3600
