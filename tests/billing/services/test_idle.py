"""The idle-GPU policy (``billing.services.idle``): a running job whose GPUs all stay under the
queue's threshold for its window is flagged (once per attempt) and, with ``stop``, fails with the
reason and its owner is told; anything short of that (too short a run, one busy sample, no
measurement) is left alone."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core import mail
from django.utils import timezone

from billing.models import IdleFlag, IdlePolicy
from billing.services.idle import idle_check
from billing.utilization import NoUtilization, SimulatedUtilization
from portal.jobs.models import Job
from portal.jobs.states import JobState
from portal.notifications.models import Event, Notification
from scheduling.adapters.simulated import SimulatedCluster
from tests.billing.conftest import Run, run_job

pytestmark = pytest.mark.django_db


class Peaks:
    """A cluster whose GPU utilization peaks are given per job (the simulated source asks it)."""

    def __init__(self, peaks: dict[int, float | None]) -> None:
        self.peaks = peaks
        self.asked: list[tuple[int, float]] = []

    def gpu_peak_utilization(self, *, job_id, start, end):
        self.asked.append((job_id, (end - start).total_seconds()))
        return self.peaks.get(job_id)


def policy(world, action=IdlePolicy.Action.STOP, team="vision", below=10.0, minutes=30):
    return IdlePolicy.objects.create(
        cluster_queue=world.cluster_queues[team], below_pct=below, minutes=minutes, action=action
    )


def running(world, *, minutes_ago: int, team="vision", **spec):
    start = timezone.now() - timedelta(minutes=minutes_ago)
    return run_job(world, team=team, runs=[Run(start, None)], **{"gpu": 1, **spec}).job


def check(peaks, **kwargs):
    return idle_check(source=SimulatedUtilization(backend=peaks), backend=SimulatedCluster(), **kwargs)


def test_an_idle_job_is_stopped_with_the_reason_and_its_owner_is_told(world, django_capture_on_commit_callbacks):
    policy(world)
    world.users["alice"].email = "alice@example.org"
    world.users["alice"].save()
    job = running(world, minutes_ago=45)
    peaks = Peaks({job.pk: 3.5})
    with django_capture_on_commit_callbacks(execute=True):
        flags = check(peaks)
    assert [(f.job_id, f.attempt, f.peak_util_pct, f.stopped) for f in flags] == [(job.pk, 1, 3.5, True)]
    assert peaks.asked == [(job.pk, 30 * 60)]  # the policy's window, not the whole run
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert "idle-GPU policy" in job.message
    assert "3.5 %" in job.message
    told = Notification.objects.get(job=job)
    assert told.event == Event.FAILED
    assert told.user == job.owner
    assert [m.to for m in mail.outbox] == [["alice@example.org"]]
    assert "idle-GPU policy" in mail.outbox[0].body


def test_with_flag_only_the_job_keeps_running_and_its_page_says_it_is_idle(world, client):
    policy(world, action=IdlePolicy.Action.FLAG)
    job = running(world, minutes_ago=45)
    check(Peaks({job.pk: 0.0}))
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    client.force_login(job.owner)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert 'id="idle-flag-1"' in page
    assert "at most 0.0 % utilization for 30 min" in page
    # Once per attempt: the next check writes nothing new.
    assert check(Peaks({job.pk: 0.0})) == []
    assert IdleFlag.objects.count() == 1


@pytest.mark.parametrize(
    ("minutes_ago", "peak", "why"),
    [
        (20, 1.0, "ran for less than the window"),
        (45, 10.0, "one sample at the threshold"),
        (45, 55.0, "busy"),
        (45, None, "never measured"),
    ],
)
def test_a_job_that_is_not_idle_for_the_whole_window_is_left_alone(world, minutes_ago, peak, why):
    policy(world)
    job = running(world, minutes_ago=minutes_ago)
    assert check(Peaks({job.pk: peak})) == [], why
    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING


def test_only_queues_with_an_enabled_policy_and_only_gpu_jobs_are_checked(world):
    policy(world, team="nlp")
    disabled = policy(world, team="vision")
    disabled.enabled = False
    disabled.save()
    vision = running(world, minutes_ago=45)
    nlp_cpu = running(world, team="nlp", minutes_ago=45, gpu=0)
    nlp_gpu = running(world, team="nlp", minutes_ago=45)
    flags = check(Peaks({vision.pk: 0.0, nlp_cpu.pk: 0.0, nlp_gpu.pk: 0.0}))
    assert [f.job_id for f in flags] == [nlp_gpu.pk]


def test_without_utilization_no_job_is_ever_flagged(world):
    policy(world)
    running(world, minutes_ago=120)
    assert idle_check(source=NoUtilization(), backend=SimulatedCluster()) == []
