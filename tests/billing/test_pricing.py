"""The pure cost arithmetic: no database."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from billing import pricing
from tests.billing.conftest import utc

NOW = utc(2026, 11, 21, 6, 20, 5)


@pytest.mark.parametrize(
    ("text", "start", "end"),
    [
        ("7d", utc(2026, 11, 14, 7), utc(2026, 11, 21, 7)),
        ("24h", utc(2026, 11, 20, 7), utc(2026, 11, 21, 7)),
        ("today", utc(2026, 11, 21), utc(2026, 11, 21, 7)),
        ("month", utc(2026, 11, 1), utc(2026, 11, 21, 7)),
        ("lastmonth", utc(2026, 10, 1), utc(2026, 11, 1)),
        ("2026-10-01T00:00:00Z,2026-10-02T00:00:00Z", utc(2026, 10, 1), utc(2026, 10, 2)),
        ("1759276800,1759363200", utc(2025, 10, 1), utc(2025, 10, 2)),
    ],
)
def test_windows_are_read_like_opencost_and_aligned_to_hours(text, start, end):
    assert pricing.parse_window(text, NOW) == (start, end)


@pytest.mark.parametrize(
    "text",
    [
        "7x",
        "30m",
        "2026-10-02,2026-10-01",
        "soon",
        "401d",
        "1000000d",
        "99999999999999999999d",
        "99999999999999,1",
        "0001-01-01T00:00:00+01:00,0001-01-02T00:00:00Z",
        "9999-12-31T23:30:00Z,9999-12-31T23:50:00Z",
    ],
)
def test_unreadable_windows_say_why(text):
    with pytest.raises(pricing.WindowError):
        pricing.parse_window(text, NOW)


def test_steps_are_whole_hours():
    window = pricing.parse_window("7d", NOW)
    assert pricing.parse_step_hours("1d", window) == 24
    assert pricing.parse_step_hours(None, window) == 7 * 24
    with pytest.raises(pricing.WindowError, match="whole hours"):
        pricing.parse_step_hours("30m", window)
    for text in ("0h", "0d", "401d", "99999999999h"):
        with pytest.raises(pricing.WindowError, match="between 1h and 400 days"):
            pricing.parse_step_hours(text, window)


@given(st.integers(min_value=0, max_value=10**30), st.integers(min_value=1, max_value=10**20))
def test_ratio_rounding_is_exact_half_even(numerator, denominator):
    expected = Decimal(round(Fraction(numerator, denominator) * 10**6)).scaleb(-6)
    assert pricing.ratio_to_decimal(numerator, denominator) == expected


@pytest.mark.parametrize(
    ("gpus", "sevenths_of_a_milli"),
    [("1", 7000), ("0.250000", 1750), ("0.428571", 3000), ("1.285714", 9000), ("0.142857", 1000), ("8", 56000)],
)
def test_every_legal_share_is_a_whole_number_of_7000ths(gpus, sevenths_of_a_milli):
    assert pricing.gpu_share_7000ths(gpus) == sevenths_of_a_milli


@given(
    st.datetimes(min_value=utc(2026, 1, 1).replace(tzinfo=None), max_value=utc(2026, 12, 1).replace(tzinfo=None)),
    st.integers(min_value=1, max_value=10 * 86_400 * 10**6),
)
def test_hour_pieces_add_up_to_the_interval(start, micros):
    start = start.replace(tzinfo=utc(2026, 1, 1).tzinfo)
    end = start + timedelta(microseconds=micros)
    pieces = pricing.hour_pieces(start, end)
    assert sum(m for _, m in pieces) == micros
    assert all(0 < m <= pricing.US_PER_HOUR for _, m in pieces)
    assert [h for h, _ in pieces] == list(range(pieces[0][0], pieces[0][0] + len(pieces)))


def test_a_price_applies_from_its_hour_and_unknown_models_use_the_fallback():
    jan = utc(2026, 1, 1)
    prices = [
        pricing.Price("gpu", "A100-80GB", "on-demand", jan, Decimal("4")),
        pricing.Price("gpu", "A100-80GB", "on-demand", utc(2026, 1, 1, 5, 30), Decimal("5")),
        pricing.Price("gpu", "", "on-demand", jan, Decimal("3")),
        pricing.Price("cpu", "", "on-demand", jan, Decimal("0.03")),
    ]
    h0 = pricing.epoch_hour(jan)
    lookup = pricing.PriceLookup(pricing.price_segments(prices, ["A100-80GB"], h0, h0 + 24))
    assert lookup.at("A100-80GB", "on-demand", h0 + 4)[0] == 4
    assert lookup.at("A100-80GB", "on-demand", h0 + 5)[0] == 5
    assert lookup.at("B200", "on-demand", h0 + 5) == (Decimal(3), Decimal("0.03"), Decimal(0))
    assert lookup.at("A100-80GB", "spot", h0) == (0, 0, 0)


def test_default_prices_follow_public_list_prices():
    prices = {(p.resource, p.gpu_model, p.capacity_type): p.usd_per_hour for p in pricing.default_prices(NOW)}
    a100 = prices[("gpu", "A100-80GB", "on-demand")]
    assert Decimal(3) <= a100 <= Decimal(4)
    assert Decimal(10) <= prices[("gpu", "H100-80GB", "on-demand")] <= Decimal(15)
    assert Decimal("0.30") <= prices[("gpu", "A100-80GB", "spot")] / a100 <= Decimal("0.50")
    assert Decimal("0.60") <= prices[("gpu", "A100-80GB", "reserved")] / a100 <= Decimal("0.70")


def test_idle_is_shared_in_proportion_to_usage():
    windows = [(utc(2026, 1, 1), utc(2026, 1, 1, 1))]
    hour = pricing.GPU_HOUR
    rows = [
        pricing.UsageRow("a", 0, "A100", "on-demand", pricing.UsageSums(gpu_usage=3 * hour)),
        pricing.UsageRow("b", 0, "A100", "on-demand", pricing.UsageSums(gpu_usage=1 * hour)),
    ]
    idle = [pricing.IdleRow(0, "A100", "on-demand", 4 * hour, 4 * hour * 4_000_000, 4 * hour)]  # 4 idle at $4
    shared = pricing.allocation_assemble(
        rows=rows, idle_rows=idle, windows=windows, aggregate="namespace", step_hours=1, show_idle=True, share_idle=True
    )
    assert shared.totals["a"].shared_idle_cost == 12
    assert shared.totals["b"].shared_idle_cost == 4
    shown = pricing.allocation_assemble(
        rows=rows,
        idle_rows=idle,
        windows=windows,
        aggregate="namespace",
        step_hours=1,
        show_idle=True,
        share_idle=False,
    )
    assert shown.totals[pricing.IDLE].gpu_hours == 4
    assert shown.totals[pricing.IDLE].gpu_cost == 16


@pytest.mark.parametrize(
    ("util", "gpus", "mig", "advice"),
    [
        (12.0, 4, "", "request 1 GPU(s) instead of 4"),
        (20.0, 1, "", "a fraction"),
        (20.0, 3 / 7, "3g.40gb", "smaller share than MIG 3g.40gb"),
        (95.0, 1, "", "GPU-bound"),
        (60.0, 1, "", ""),
        (None, 1, "", ""),
    ],
)
def test_recommendations_follow_utilization(util, gpus, mig, advice):
    text = pricing.recommendation(util_pct=util, gpus_per_replica=gpus, mig_profile=mig)
    assert advice in text if advice else text == ""


def test_alert_thresholds():
    assert pricing.thresholds_crossed(spend_usd=Decimal(79), budget_usd=Decimal(100)) == []
    assert pricing.thresholds_crossed(spend_usd=Decimal(80), budget_usd=Decimal(100)) == [80]
    assert pricing.thresholds_crossed(spend_usd=Decimal(130), budget_usd=Decimal(100)) == [80, 100]


def test_capacity_holds_from_each_change_until_the_next():
    h0 = pricing.epoch_hour(utc(2026, 1, 1))
    changes = [(utc(2026, 1, 1, 0, 30), 8), (utc(2026, 1, 1, 2), 16), (utc(2026, 1, 1, 3, 15), 0)]
    usage = pricing.capacity_usage(changes, h0, h0 + 5)
    gpu_hour = pricing.GPU_HOUR
    assert usage == {h0: 4 * gpu_hour, h0 + 1: 8 * gpu_hour, h0 + 2: 16 * gpu_hour, h0 + 3: 4 * gpu_hour}
