"""Advice (``billing.core.advice``): recommendations from utilization, budget thresholds."""

from __future__ import annotations

from decimal import Decimal

import pytest

from billing.core.advice import recommendation, thresholds_crossed


@pytest.mark.parametrize(
    ("util", "gpus", "mig", "advice"),
    [
        (12.0, 4, "", "request 1 GPU(s) instead of 4"),
        (20.0, 1, "", "a fraction"),
        (20.0, 3 / 7, "3g.40gb", "smaller share than MIG 3g.40gb"),
        (20.0, 1 / 7, "1g.10gb", "already the smallest slice: a smaller GPU model"),
        (20.0, 1 / 7, "1g.20gb", "already the smallest slice"),
        (95.0, 1, "", "GPU-bound"),
        (60.0, 1, "", ""),
        (None, 1, "", ""),
    ],
)
def test_recommendations_follow_utilization(util, gpus, mig, advice):
    text = recommendation(util_pct=util, gpus_per_replica=gpus, mig_profile=mig)
    assert advice in text if advice else text == ""


def test_alert_thresholds():
    assert thresholds_crossed(spend_usd=Decimal(79), budget_usd=Decimal(100)) == []
    assert thresholds_crossed(spend_usd=Decimal(80), budget_usd=Decimal(100)) == [80]
    assert thresholds_crossed(spend_usd=Decimal(130), budget_usd=Decimal(100)) == [80, 100]


@pytest.mark.parametrize("mig", ["1g.5gb", "1g.10gb", "1g.12gb", "1g.20gb"])
def test_the_smallest_mig_slice_is_never_told_to_take_a_smaller_one(mig):
    assert "smaller share than" not in recommendation(util_pct=5.0, gpus_per_replica=1 / 7, mig_profile=mig)
