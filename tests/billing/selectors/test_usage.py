"""What ran (``billing.selectors.usage``): the dashboard, metering and running jobs read the same intervals."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from billing.core.intervals import run_intervals
from billing.models import UsageRecord
from billing.records import usage_record
from billing.selectors.allocation import record_group
from billing.selectors.usage import run_interval_list, run_transitions, running_usage
from billing.services.metering import metering_run
from portal.jobs.models import Job, JobTransition
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


@pytest.mark.django_db
def test_running_usage_read_as_rows_equals_the_records_built_from_each_job_and_names_owners_without_queries(
    world, django_assert_num_queries
):
    now = timezone.now().replace(microsecond=0)
    hour_ago = now - timedelta(hours=1)
    specs = [
        {"team": "vision", "gpu": 2, "labels": (("project", "x"), ("owner", "not-the-owner"))},
        {"team": "nlp", "gpu": 0, "gpu_milli": 250, "replicas": 3, "cpu_milli": 1500, "memory_mib": 4096},
        {"team": "vision", "owner": "carol", "gpu": 1, "replicas": 2, "kind": "inference"},
    ]
    jobs = [run_job(world, runs=[Run(hour_ago, None)], **spec).job for spec in specs]
    # History from before admission details existed: the job's own request is billed.
    JobTransition.objects.filter(job=jobs[1]).update(detail={})
    expected = {}
    for job in Job.objects.filter(pk__in=[j.pk for j in jobs]).select_related(
        "team", "local_queue__cluster_queue", "priority_class", "owner"
    ):
        for interval in run_intervals(run_transitions(jobs=[job.pk])):
            if interval.end is None:
                expected[job.pk] = (usage_record(job, interval, end=now), job.owner.username)
    fields = [f.attname for f in expected[jobs[0].pk][0]._meta.concrete_fields if f.attname != "id"]
    records = running_usage(now=now)
    assert sorted(r.job_id for r in records) == sorted(expected)
    for record in records:
        built, owner = expected[record.job_id]
        assert [getattr(record, f) for f in fields] == [getattr(built, f) for f in fields]
        with django_assert_num_queries(0):
            assert record_group(record, aggregate="owner", teams={}) == owner
    assert expected[jobs[0].pk][0].labels["owner"] == "not-the-owner"  # a job's own label wins, as before
    team_only = running_usage(now=now, team_ids=[world.teams["nlp"].pk])
    assert [r.job_id for r in team_only] == [jobs[1].pk]
