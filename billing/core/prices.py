"""The price book as values: entries, the seed list prices, price segments over time, lookup by hour.

A price applies from the UTC hour its ``effective_from`` falls in until the next entry for the same
item. A GPU model without entries of its own is priced by the GPU entries with an empty model (the
fallback); a price that is missing altogether is zero.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from billing.core.units import decimal_units, epoch_hour

CAPACITY_TYPES = ("on-demand", "spot", "reserved", "off-peak")

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
# Off-peak (jobs that start only in the off-peak hours, OFFPEAK_HOURS) at 70 %: the night discount of
# on-premise chargeback schemes; the price book's admins set their own.
CAPACITY_TYPE_FACTOR = {
    "on-demand": Decimal("1"),
    "spot": Decimal("0.40"),
    "reserved": Decimal("0.65"),
    "off-peak": Decimal("0.70"),
}


@dataclass(frozen=True, slots=True)
class Price:
    resource: str  # gpu, cpu, memory (a ``billing.core.units.Meter``'s resource)
    gpu_model: str
    capacity_type: str
    effective_from: datetime
    usd_per_hour: Decimal


def price_version(prices: Iterable[Price]) -> str:
    """A fingerprint of the whole price book: any added, removed or changed entry changes it."""
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
        cpu_usd = (ON_DEMAND_CPU_CORE_USD * factor).quantize(Decimal("0.000001"))
        memory_usd = (ON_DEMAND_MEMORY_GIB_USD * factor).quantize(Decimal("0.000001"))
        prices.append(Price("cpu", "", capacity_type, effective_from, cpu_usd))
        prices.append(Price("memory", "", capacity_type, effective_from, memory_usd))
    return prices


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

    def in_units(self) -> PriceSegment:
        """The same segment with its prices as whole numbers of 10^-6 USD (for integer SQL sums)."""
        return PriceSegment(
            self.gpu_model,
            self.capacity_type,
            self.hour_from,
            self.hour_to,
            Decimal(decimal_units(self.gpu_usd)),
            Decimal(decimal_units(self.cpu_usd)),
            Decimal(decimal_units(self.memory_usd)),
        )


PriceTriple = tuple[Decimal, Decimal, Decimal]
"""(GPU, CPU core, memory GiB) USD per hour."""

NO_PRICE: PriceTriple = (Decimal(0), Decimal(0), Decimal(0))


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
        self._cache: dict[tuple[str, str, int], PriceTriple] = {}

    def at(self, gpu_model: str, capacity_type: str, hour: int) -> PriceTriple:
        """(GPU, CPU core, memory GiB) USD per hour; models without segments use the fallback ones."""
        key = (gpu_model, capacity_type, hour)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        found = NO_PRICE
        segments = self._segments.get((gpu_model, capacity_type)) or self._segments.get(("", capacity_type), [])
        for segment in segments:
            if segment.hour_from <= hour < segment.hour_to:
                found = (segment.gpu_usd, segment.cpu_usd, segment.memory_usd)
                break
        self._cache[key] = found
        return found
