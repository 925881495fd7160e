"""Rollups (``billing.services.rollups``): exactly the sum of the records, rebuilt from them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models import Sum

from billing.models import UsageHourly, UsageRecord
from billing.services.metering import metering_run
from billing.services.rollups import rollup_rebuild
from tests.billing.conftest import Run, rollup_totals, run_job, utc

T0 = utc(2026, 10, 5, 9, 30)


@pytest.mark.django_db
def test_the_rollup_is_exactly_the_sum_of_the_records(world):
    run_job(world, gpu=0, mig_profile="1g.10gb", replicas=3, runs=[Run(T0, T0 + timedelta(hours=26, seconds=13))])
    run_job(world, gpu=1, runs=[Run(T0 + timedelta(minutes=7), T0 + timedelta(hours=2, minutes=1))])
    metering_run()
    records = UsageRecord.objects.aggregate(gpu=Sum("gpu_usage"), cpu=Sum("cpu_milli_us"), mem=Sum("memory_mib_us"))
    totals = rollup_totals()
    assert (totals["gpu"], totals["cpu"], totals["mem"]) == (records["gpu"], records["cpu"], records["mem"])
    # 27 hours touched by the first; the second's 3 hours share their keys (same team, queue, model).
    assert UsageHourly.objects.count() == 27
    rebuilt_before = rollup_totals()
    rollup_rebuild()
    rebuilt = rollup_totals()
    assert rebuilt["util"] == pytest.approx(rebuilt_before.pop("util"))  # a float weight
    assert {k: v for k, v in rebuilt.items() if k != "util"} == rebuilt_before
