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


def test_jobs_reported_started_together_get_the_rows_one_transition_each_writes(world):
    """``jobs_running`` (a batch) against ``job_transition`` one job at a time, on twin jobs: the same
    job columns, history rows and attempt starts. A requeued job's second attempt is started, not its
    first, and an illegal start writes nothing."""
    from portal.jobs.models import Job, JobAttempt
    from portal.jobs.transitions import jobs_running

    t0 = timezone.now().replace(microsecond=0) - timedelta(hours=1)

    def admitted(requeued: bool) -> Job:
        job = world.submit()
        job_transition(job=job, to_state=JobState.ADMITTED, at=t0, reason="admitted", detail={"gpus": "1.000000"})
        if requeued:
            job_transition(job=job, to_state=JobState.PENDING, at=t0 + timedelta(seconds=1), reason="requeued")
            job_transition(job=job, to_state=JobState.ADMITTED, at=t0 + timedelta(seconds=2), reason="again")
        return job

    shapes = [False, True, False]
    one_by_one, batched = [admitted(r) for r in shapes], [admitted(r) for r in shapes]
    starts = [(t0 + timedelta(seconds=10 + n), f"pods running {n}", {"nodes": [f"n{n}"]}) for n in range(3)]
    for job, (at, reason, detail) in zip(one_by_one, starts, strict=True):
        job_transition(job=job, to_state=JobState.RUNNING, at=at, reason=reason, actor="cluster", detail=detail)
    jobs_running(starts=[(job, *start) for job, start in zip(batched, starts, strict=True)], actor="cluster")

    def written(job: Job) -> tuple:
        row = Job.objects.values_list("state", "message", "admitted_at", "started_at", "attempt").get(pk=job.pk)
        history = list(
            job.transitions.exclude(from_state="")  # the submission, at each job's own time
            .order_by("id")
            .values_list("from_state", "to_state", "at", "reason", "actor", "detail")
        )
        attempts = list(JobAttempt.objects.filter(job=job).order_by("number").values_list("number", "started_at"))
        return row, history, attempts

    for twin, job in zip(one_by_one, batched, strict=True):
        assert written(job) == written(twin)
        assert (job.state, job.started_at) == (JobState.RUNNING, Job.objects.get(pk=job.pk).started_at)
    assert written(batched[1])[2] == [(1, None), (2, t0 + timedelta(seconds=11))]
    pending = world.submit()
    with pytest.raises(IllegalTransition):
        jobs_running(starts=[(batched[0], t0, "again", {}), (pending, t0, "never admitted", {})])
    assert Job.objects.get(pk=pending.pk).state == JobState.PENDING


def test_jobs_admitted_together_get_the_rows_one_admission_each_writes(world):
    """``jobs_admitted`` (a cycle's admissions in a few statements) against ``job_transition`` one job
    at a time, on twin jobs: the same job columns, history, live placement rows and attempts (a
    requeued job's wait begins at its last attempt's end, a first one's at its submission)."""
    from portal.jobs.models import Job, JobAttempt, ReplicaPlacement
    from portal.jobs.transitions import jobs_admitted
    from scheduling.engine.model import ReplicaPlacement as Placement

    t0 = timezone.now().replace(microsecond=0) - timedelta(hours=1)
    a100 = world.models["A100-80GB"]

    def pending(requeued: bool) -> Job:
        job = world.submit()
        if requeued:
            job_transition(job=job, to_state=JobState.ADMITTED, at=t0, reason="first", placements=[])
            job_transition(job=job, to_state=JobState.RUNNING, at=t0 + timedelta(seconds=1))
            job_transition(job=job, to_state=JobState.PENDING, at=t0 + timedelta(seconds=7), reason="requeued")
        return job

    shapes = [False, True, False]
    one_by_one, batched = [pending(r) for r in shapes], [pending(r) for r in shapes]
    gang = [
        Placement("a100-0", (2, 3), 1000, None, None, 1000, 1024),
        Placement("a100-1", (0,), 1000, None, None, 1, 8),
    ]
    placements = [[Placement("a100-0", (0,), 1000, None, None, 2000, 4096)], [], gang]
    admits = [
        (t0 + timedelta(seconds=20 + n), f"admitted on A100-80GB {n}", {"gpu_model": "A100-80GB", "gpus": str(n + 1)})
        for n in range(3)
    ]
    for job, (at, reason, detail), where in zip(one_by_one, admits, placements, strict=True):
        job.gpu_model, job.capacity_type = a100, "spot"
        job.save(update_fields=["gpu_model", "capacity_type"])
        job_transition(job=job, to_state=JobState.ADMITTED, at=at, reason=reason, detail=detail, placements=where)
    for job in batched:
        job.gpu_model, job.capacity_type = a100, "spot"
    jobs_admitted(admits=[(job, *a, w) for job, a, w in zip(batched, admits, placements, strict=True)])

    def written(job: Job) -> tuple:
        columns = ("state", "message", "admitted_at", "started_at", "attempt", "pending_reason", "queue_position",
                   "estimated_start", "gpu_model", "capacity_type")  # fmt: skip
        row = Job.objects.values_list(*columns).get(pk=job.pk)
        history = list(
            job.transitions.exclude(from_state="")
            .order_by("id")
            .values_list("from_state", "to_state", "at", "reason", "actor", "detail")
        )
        skip = {"id", "job", "job_id"}
        live = [
            {k: v for k, v in p.items() if k not in skip}
            for p in ReplicaPlacement.objects.filter(job=job).order_by("replica").values()
        ]
        attempts = [
            {k: v for k, v in a.items() if k not in skip}
            for a in JobAttempt.objects.filter(job=job).order_by("number").values()
        ]
        return row, history, live, attempts

    for twin, job in zip(one_by_one, batched, strict=True):
        assert written(job) == written(twin)
        assert (job.state, job.attempt) == Job.objects.values_list("state", "attempt").get(pk=job.pk)
    requeued = JobAttempt.objects.get(job=batched[1], number=2)
    assert requeued.queued_at == t0 + timedelta(seconds=7)  # the last attempt's end
    first = batched[0]
    assert JobAttempt.objects.get(job=first).queued_at == min(first.created_at, first.admitted_at)  # submitted
    assert ReplicaPlacement.objects.filter(job=batched[2]).count() == 2
