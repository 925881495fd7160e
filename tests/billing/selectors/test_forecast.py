"""The month-end forecast (``billing.selectors.forecast``), recomputed from the rule: spend so far
(price x GPU-hours of this month's runs) + price x GPUs of what runs now x hours left in the month."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from fractions import Fraction

import pytest
from django.utils import timezone

from billing.core.windows import month_start, next_month
from billing.models import Budget, PriceBookEntry
from billing.selectors.forecast import month_forecast_list
from billing.services import metering_run
from tests.billing.conftest import Run, run_job

pytestmark = pytest.mark.django_db


def price(model: str, capacity_type: str) -> Fraction:
    entry = PriceBookEntry.objects.get(resource="gpu", gpu_model=model, capacity_type=capacity_type)
    return Fraction(entry.usd_per_hour)


def hours(delta: timedelta) -> Fraction:
    return Fraction(round(delta.total_seconds() * 1_000_000), 3_600_000_000)


def test_the_forecast_is_spend_so_far_plus_the_run_rate_until_the_months_end(world):
    now = timezone.now()
    first = max(month_start(now), now - timedelta(hours=3))
    running_since = max(month_start(now), now - timedelta(minutes=30))
    run_job(world, gpu=2, runs=[Run(first, first + timedelta(hours=1), "A100-80GB", "on-demand")])
    run_job(world, gpu=1, runs=[Run(running_since, None, "T4", "spot")])
    run_job(world, team="nlp", gpu=3, runs=[Run(first, first + timedelta(minutes=20), "A100-80GB", "spot")])
    metering_run()
    Budget.objects.create(team=world.teams["vision"], monthly_gpu_usd=Decimal(10))

    rows = {r.team.slug: r for r in month_forecast_list(teams=world.teams.values(), now=now)}

    spent = 2 * price("A100-80GB", "on-demand") + hours(now - running_since) * price("T4", "spot")
    rate = price("T4", "spot")
    forecast = spent + rate * hours(next_month(now) - now)
    vision = rows["vision"]
    assert float(vision.spend_usd) == pytest.approx(float(spent), abs=0.006)
    assert vision.rate_usd_per_hour == Decimal(rate.numerator) / Decimal(rate.denominator)
    assert float(vision.forecast_usd) == pytest.approx(float(forecast), abs=0.006)
    assert vision.forecast_pct == pytest.approx(float(vision.forecast_usd) * 10)
    nlp = rows["nlp"]
    nlp_spent = 3 * hours(timedelta(minutes=20)) * price("A100-80GB", "spot")
    assert float(nlp.spend_usd) == pytest.approx(float(nlp_spent), abs=0.006)
    assert nlp.rate_usd_per_hour == 0
    assert nlp.forecast_usd == nlp.spend_usd  # nothing runs: the month ends where it is
    assert nlp.budget_usd is None


def test_a_team_over_its_budget_reads_over_with_its_real_percentage(world):
    now = timezone.now()
    first = max(month_start(now), now - timedelta(hours=3))
    run_job(world, gpu=4, runs=[Run(first, first + timedelta(hours=1))])
    metering_run()
    Budget.objects.create(team=world.teams["vision"], monthly_gpu_usd=Decimal(10), hard_stop=True)

    vision = next(r for r in month_forecast_list(teams=[world.teams["vision"]], now=now))

    expected = 4 * price("A100-80GB", "on-demand") / 10 * 100
    assert vision.used_pct == pytest.approx(float(expected), abs=0.1)
    assert vision.used_pct > 100
    assert vision.bar_pct == 100
    assert vision.level == "over"
    assert vision.blocked
