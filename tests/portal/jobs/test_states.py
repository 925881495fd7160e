"""The job state table (``portal.jobs.states``) and its one write (``portal.jobs.transitions``)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from portal.jobs.models import JobTransition
from portal.jobs.states import FINAL_STATES, TRANSITIONS, IllegalTransition, JobState, check_transition
from portal.jobs.transitions import job_transition


@pytest.mark.parametrize(
    ("source", "target"),
    [
        (JobState.PENDING, JobState.ADMITTED),
        (JobState.ADMITTED, JobState.RUNNING),
        (JobState.RUNNING, JobState.SUCCEEDED),
        (JobState.RUNNING, JobState.FAILED),
        (JobState.RUNNING, JobState.PREEMPTED),
        (JobState.PREEMPTED, JobState.PENDING),
        (JobState.PENDING, JobState.CANCELLED),
    ],
)
def test_it_allows_the_lifecycle_transitions(source, target):
    check_transition(source, target)


@pytest.mark.parametrize(
    ("source", "target"),
    [
        (JobState.PENDING, JobState.RUNNING),
        (JobState.PENDING, JobState.SUCCEEDED),
        (JobState.SUCCEEDED, JobState.RUNNING),
        (JobState.CANCELLED, JobState.PENDING),
        (JobState.FAILED, JobState.ADMITTED),
    ],
)
def test_it_refuses_transitions_that_skip_or_leave_a_final_state(source, target):
    with pytest.raises(IllegalTransition, match=f"a {source} job cannot become {target}"):
        check_transition(source, target)


def test_final_states_have_no_way_out():
    assert {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED} == FINAL_STATES
    assert all(TRANSITIONS[s] == frozenset() for s in FINAL_STATES)


def test_every_transition_is_timestamped_and_kept_as_history(world):
    job = world.submit()
    t0 = timezone.now()
    job_transition(job=job, to_state=JobState.ADMITTED, at=t0, reason="admitted")
    job_transition(job=job, to_state=JobState.RUNNING, at=t0 + timedelta(seconds=5), actor="cluster")
    job_transition(job=job, to_state=JobState.SUCCEEDED, at=t0 + timedelta(seconds=65), actor="cluster")
    job.refresh_from_db()
    history = list(JobTransition.objects.filter(job=job).values_list("from_state", "to_state"))
    assert history == [
        ("", "Pending"),
        ("Pending", "Admitted"),
        ("Admitted", "Running"),
        ("Running", "Succeeded"),
    ]
    assert job.admitted_at == t0
    assert job.started_at == t0 + timedelta(seconds=5)
    assert job.finished_at == t0 + timedelta(seconds=65)
    assert job.attempt == 1


def test_an_illegal_transition_writes_nothing(world):
    job = world.submit()
    with pytest.raises(IllegalTransition):
        job_transition(job=job, to_state=JobState.SUCCEEDED, at=timezone.now())
    job.refresh_from_db()
    assert job.state == JobState.PENDING
    assert job.transitions.count() == 1
