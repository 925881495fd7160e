"""The price book's seed: public list prices (``billing.core.prices.default_prices``)."""

from __future__ import annotations

from datetime import UTC, datetime

from billing.core.prices import default_prices
from billing.models import PriceBookEntry

PRICE_SEED_FROM = datetime(2024, 1, 1, tzinfo=UTC)


def price_book_seed_defaults(*, effective_from: datetime = PRICE_SEED_FROM) -> int:
    """Insert the default public list prices where missing.

    Idempotent: an entry for the same item and date is left as it is (an admin may have edited it).
    Returns the number of entries created.
    """
    created = 0
    for price in default_prices(effective_from):
        _, was_created = PriceBookEntry.objects.get_or_create(
            resource=price.resource,
            gpu_model=price.gpu_model,
            capacity_type=price.capacity_type,
            effective_from=price.effective_from,
            defaults={"usd_per_hour": price.usd_per_hour, "note": "public list price (seed)"},
        )
        created += was_created
    return created
