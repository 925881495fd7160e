"""Budget reads (``billing.selectors.budgets``): month-to-date spend."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.selectors.budgets import month_gpu_spend
from tests.billing.conftest import Run, a100_price, run_job


@pytest.mark.django_db
def test_month_spend_counts_running_jobs_up_to_now(world):
    now = timezone.now()
    start = max(now.replace(day=1, hour=0, minute=0, second=0, microsecond=0), now - timedelta(hours=2))
    run_job(world, gpu=1, runs=[Run(start, None)])
    spend = month_gpu_spend(team_ids=[world.teams["vision"].pk], now=now)[world.teams["vision"].pk]
    hours = Decimal((now - start).total_seconds()) / 3600
    assert spend == pytest.approx(hours * a100_price(), abs=Decimal("0.0001"))
