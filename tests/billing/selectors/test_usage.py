"""What ran (``billing.selectors.usage``): the dashboard, metering and running jobs read the same intervals."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from billing.models import UsageRecord
from billing.selectors.usage import run_interval_list, running_usage
from billing.services.metering import metering_run
from tests.billing.conftest import Run, run_job


@pytest.mark.django_db
def test_the_dashboard_shows_the_intervals_metering_bills_and_running_ones_up_to_now(world):
    now = timezone.now().replace(microsecond=0)
    since = now - timedelta(hours=6)
    done = run_job(world, gpu=1, runs=[Run(now - timedelta(hours=5), now - timedelta(hours=4)),
                                       Run(now - timedelta(hours=3), now - timedelta(hours=2))])  # fmt: skip
    running = run_job(world, team="nlp", gpu=2, runs=[Run(now - timedelta(hours=1), None)])
    metering_run()
    metered = sorted((r.job_id, r.start, r.end) for r in UsageRecord.objects.all())
    shown = [(i.job_id, i.start, i.end) for i in run_interval_list(since=since, now=now)]
    assert shown == [*metered, (running.job.pk, now - timedelta(hours=1), now)]
    assert {r.job_id for r in UsageRecord.objects.all()} == {done.job.pk}
    open_usage = running_usage(now=now)
    assert [(r.job_id, r.start, r.end, r.gpu_share_7000ths) for r in open_usage] == [
        (running.job.pk, now - timedelta(hours=1), now, 14000)
    ]
