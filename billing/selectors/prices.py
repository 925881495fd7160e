"""The price book as the core's values, and whether the priced per-team rollup is current."""

from __future__ import annotations

from billing.core.prices import Price, PriceSegment, price_segments, price_version
from billing.models import CostRollupState, GpuAllocationHourly, PriceBookEntry
from portal.jobs.models import GpuModel
from portal.prepared import Prepared


def price_list() -> list[Price]:
    """The price book's entries (in its order), read as plain rows: no model instance per entry."""
    return [Price(*row) for row in _PRICES.rows()]


_PRICES = Prepared(
    lambda: PriceBookEntry.objects.values_list(
        "resource", "gpu_model", "capacity_type", "effective_from", "usd_per_hour"
    )
)


def cost_rollup_current(prices: list[Price] | None = None) -> bool:
    """Whether ``TeamCostHourly`` is priced with the price book as it is now (``prices``, if loaded)."""
    state = CostRollupState.objects.first()
    return state is not None and state.price_version == price_version(price_list() if prices is None else prices)


def gpu_model_names() -> set[str]:
    """GPU models of the catalogue and of the price book."""
    models = set(GpuModel.objects.values_list("name", flat=True))
    models |= set(PriceBookEntry.objects.exclude(gpu_model="").values_list("gpu_model", flat=True))
    return models


def gpu_model_names_used(hour_from: int, hour_to: int) -> set[str]:
    """GPU models of the catalogue and the price book, and every model with usage in [hour_from, hour_to):
    usage on a model outside the catalogue is priced by the fallback entries, never left at $0."""
    return {name for (name,) in _MODEL_NAMES_USED.rows(blank="", hour_from=hour_from, hour_to=hour_to)}


def _model_names_used(*, blank: str, hour_from: int, hour_to: int):
    """``gpu_model_names_used``' three sources in one query (a UNION: each name once)."""
    # GpuAllocationHourly has a row per (hour, model, capacity type) of every UsageHourly row (both are
    # written from the same increments): the same models, from a table a hundred times smaller.
    used = GpuAllocationHourly.objects.filter(epoch_hour__gte=hour_from, epoch_hour__lt=hour_to)
    return (
        GpuModel.objects.order_by()
        .values_list("name")
        .union(
            PriceBookEntry.objects.exclude(gpu_model=blank).order_by().values_list("gpu_model"),
            used.exclude(gpu_model=blank).order_by().values_list("gpu_model"),
        )
    )


_MODEL_NAMES_USED = Prepared(_model_names_used, blank="\x00blank", hour_from=7_000_001, hour_to=7_000_002)


def price_segment_list(hour_from: int, hour_to: int) -> list[PriceSegment]:
    """The price book's segments over [hour_from, hour_to) for every GPU model with usage or a price."""
    return price_segments(price_list(), gpu_model_names_used(hour_from, hour_to), hour_from, hour_to)
