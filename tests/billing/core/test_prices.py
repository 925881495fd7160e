"""The price book as values (``billing.core.prices``): segments over time, fallback, seed prices."""

from __future__ import annotations

from decimal import Decimal

from billing.core.prices import Price, PriceLookup, default_prices, price_segments
from billing.core.units import epoch_hour
from tests.billing.conftest import utc

NOW = utc(2026, 11, 21, 6, 20, 5)


def test_a_price_applies_from_its_hour_and_unknown_models_use_the_fallback():
    jan = utc(2026, 1, 1)
    prices = [
        Price("gpu", "A100-80GB", "on-demand", jan, Decimal("4")),
        Price("gpu", "A100-80GB", "on-demand", utc(2026, 1, 1, 5, 30), Decimal("5")),
        Price("gpu", "", "on-demand", jan, Decimal("3")),
        Price("cpu", "", "on-demand", jan, Decimal("0.03")),
    ]
    h0 = epoch_hour(jan)
    lookup = PriceLookup(price_segments(prices, ["A100-80GB"], h0, h0 + 24))
    assert lookup.at("A100-80GB", "on-demand", h0 + 4)[0] == 4
    assert lookup.at("A100-80GB", "on-demand", h0 + 5)[0] == 5
    assert lookup.at("B200", "on-demand", h0 + 5) == (Decimal(3), Decimal("0.03"), Decimal(0))
    assert lookup.at("A100-80GB", "spot", h0) == (0, 0, 0)


def test_default_prices_follow_public_list_prices():
    prices = {(p.resource, p.gpu_model, p.capacity_type): p.usd_per_hour for p in default_prices(NOW)}
    a100 = prices[("gpu", "A100-80GB", "on-demand")]
    assert Decimal(3) <= a100 <= Decimal(4)
    assert Decimal(10) <= prices[("gpu", "H100-80GB", "on-demand")] <= Decimal(15)
    assert Decimal("0.30") <= prices[("gpu", "A100-80GB", "spot")] / a100 <= Decimal("0.50")
    assert Decimal("0.60") <= prices[("gpu", "A100-80GB", "reserved")] / a100 <= Decimal("0.70")
