"""Item 9: an admitted job whose pods never run is requeued with an exponential back-off and an
attempt limit (then Failed with the reason); the quota it held is shown and counted per queue."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.test import TestCase
from django.utils import timezone

from portal.jobs.models import Job
from portal.jobs.states import JobState
from scheduling.adapters.contract import Observation
from scheduling.adapters.simulated import SimulatedCluster
from scheduling.services import cycle_run, jobs_sweep

pytestmark = pytest.mark.django_db


class PodsNeverRun(SimulatedCluster):
    """The simulated cluster, except that no pod ever starts (an image that never pulls)."""

    def observe(self, *, now: datetime) -> list[Observation]:
        return []


def cycle(at: datetime) -> None:
    with TestCase.captureOnCommitCallbacks(execute=True):
        cycle_run(now=at, backend=PodsNeverRun())


def sweep(at: datetime) -> int | None:
    with TestCase.captureOnCommitCallbacks(execute=True):
        return jobs_sweep(now=at, backend=PodsNeverRun())


def test_a_job_whose_pods_never_run_backs_off_exponentially_then_fails_with_the_reason(world, settings, api):
    settings.ADMITTED_TIMEOUT_S = 600
    settings.ADMITTED_BACKOFF_BASE_S = 60
    settings.ADMITTED_REQUEUE_LIMIT = 2
    job = world.submit(gpu=2)
    t = timezone.now()
    backoffs = []
    for failure in (1, 2):
        cycle(t)
        job.refresh_from_db()
        assert job.state == JobState.ADMITTED, (failure, job.message)
        t += timedelta(seconds=601)
        assert sweep(t) == 1
        job.refresh_from_db()
        assert job.state == JobState.PENDING
        assert job.start_failures == failure
        assert job.pending_reason["kind"] == "backoff"
        backoff = (job.not_before - t).total_seconds()
        backoffs.append(backoff)
        cycle(t + timedelta(seconds=backoff - 1))  # still in its back-off: not admitted
        job.refresh_from_db()
        assert job.state == JobState.PENDING
        t += timedelta(seconds=backoff + 1)
    assert backoffs == [60, 120]
    cycle(t)
    t += timedelta(seconds=601)
    sweep(t)
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert "pods not running 600 s after admission (3 times); not retried" in job.message
    assert job.quota_held_s == pytest.approx(3 * 601, abs=1)
    body = api("alice").get(f"/api/v1/jobs/{job.pk}/").json()
    assert body["start_failures"] == 3
    assert body["quota_held_s"] == pytest.approx(3 * 601, abs=1)
    assert "backoff_s" in Job.objects.get(pk=job.pk).transitions.filter(to_state="Pending").last().detail


def test_a_job_that_must_not_be_requeued_fails_at_its_first_failed_start(world, settings):
    settings.ADMITTED_TIMEOUT_S = 600
    job = world.submit(gpu=1, restart_policy=Job.RestartPolicy.NEVER)
    t = timezone.now()
    cycle(t)
    sweep(t + timedelta(seconds=601))
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert "(once); not retried" in job.message


def test_the_held_quota_is_counted_per_queue_in_the_metrics_and_shown_on_the_job_page(world, settings, client):
    settings.ADMITTED_TIMEOUT_S = 600
    settings.METRICS_TOKEN = "m"
    job = world.submit(gpu=1)
    t = timezone.now()
    cycle(t)
    sweep(t + timedelta(seconds=601))
    body = client.get("/metrics", headers={"Authorization": "Bearer m"}).content.decode()
    assert 'portal_pods_ready_timeouts_total{cluster_queue="cq-vision"} 1.0' in body
    assert 'portal_quota_held_without_running_seconds_total{cluster_queue="cq-vision"} 601' in body
    assert 'portal_backoff_workloads{cluster_queue="cq-vision"} 1.0' in body
    client.force_login(world.users["alice"])
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "quota held 601 s without running" in page
