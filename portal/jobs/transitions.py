"""The job state machine's one write: ``job_transition``, and the same write for many jobs at once
where the cluster reports or a cycle decides thousands together (``jobs_running``, ``jobs_admitted``:
the same rows, in a few statements).

It imports only models, the state table and the share arithmetic (and Django's database connection),
so every layer that moves a job (services, the ORM adapter, the demo seeder) can call it without
importing the services that enqueue cycles or stop pods.

Besides the job row and its history row, a transition keeps the job's attempts (``JobAttempt``) in
the same transaction:

1. Admitted opens attempt ``job.attempt`` with its placement (also written as the live
   ``ReplicaPlacement`` rows) and the time its wait began.
2. Running stamps the attempt's start.
3. Leaving Admitted/Running closes the attempt: its end, the state it ended in and why.
4. Back to Pending marks the last attempt requeued and clears the job's admission and start times,
   which describe the current attempt only (the attempts keep the old ones).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.db import connection
from django.utils import timezone

from portal.jobs.models import Job, JobAttempt, JobTransition, ReplicaPlacement
from portal.jobs.states import ACTIVE_STATES, FINAL_STATES, JobState, check_transition
from scheduling.engine.model import ReplicaPlacement as EnginePlacement
from scheduling.engine.shares import billed_units, billed_units_of_gpus, placement_billed_units


def job_transition(
    *,
    job: Job,
    to_state: str,
    at: datetime,
    reason: str = "",
    actor: str = "scheduler",
    detail: dict | None = None,
    placements: Sequence[EnginePlacement] = (),
) -> Job:
    """Move a job to ``to_state`` (legal per the state table), stamp it and record the history row.

    ``placements`` (admissions only) are where the replicas go: they become the live placement rows
    and the new attempt's record. Callers hold a row lock on the job (``select_for_update``) when
    racing writers are possible.
    """
    check_transition(job.state, to_state)
    from_state = job.state
    job.state = to_state
    fields = ["state", "updated_at", "message"]
    job.message = reason[:500]
    if to_state == JobState.ADMITTED:
        queued_at = _waits_began([job])[job.pk]
        job.admitted_at = at
        job.started_at = None
        job.attempt += 1
        job.pending_reason = {}
        job.queue_position = None
        job.estimated_start = None
        fields += ["admitted_at", "started_at", "attempt", "pending_reason", "queue_position", "estimated_start"]
    elif to_state == JobState.RUNNING:
        job.started_at = at
        fields.append("started_at")
    elif to_state == JobState.PENDING:
        job.admitted_at = None
        job.started_at = None
        fields += ["admitted_at", "started_at"]
    if to_state in FINAL_STATES:
        job.finished_at = at
        fields.append("finished_at")
    job.save(update_fields=fields)
    JobTransition.objects.create(
        job=job,
        from_state=from_state,
        to_state=to_state,
        at=at,
        reason=reason[:500],
        actor=actor,
        detail=detail or {},
    )
    if to_state == JobState.ADMITTED:
        _attempt_open(job, at=at, queued_at=queued_at, detail=detail or {}, placements=placements)
    elif to_state == JobState.RUNNING:
        JobAttempt.objects.filter(job=job, number=job.attempt, started_at__isnull=True).update(started_at=at)
    elif from_state in ACTIVE_STATES:
        JobAttempt.objects.filter(job=job, number=job.attempt).update(
            ended_at=at, outcome=to_state, end_reason=reason[:500], requeued=to_state == JobState.PENDING
        )
    elif to_state == JobState.PENDING and job.attempt:
        JobAttempt.objects.filter(job=job, number=job.attempt).update(requeued=True)
    if to_state not in ACTIVE_STATES:
        job.placements.all().delete()
    return job


def jobs_running(*, starts: Sequence[tuple[Job, datetime, str, dict]], actor: str = "scheduler") -> None:
    """``job_transition(job=job, to_state=RUNNING, at=at, reason=reason, actor=actor, detail=detail)``
    for each ``(job, at, reason, detail)`` of distinct jobs, written in three statements instead of
    three per job (the cluster reports thousands of jobs started at once when a cluster fills):
    the same job columns, history rows and attempt start. Callers hold the jobs' row locks."""
    if connection.vendor != "postgresql" or len(starts) < 2:
        for job, at, reason, detail in starts:
            job_transition(job=job, to_state=JobState.RUNNING, at=at, reason=reason, actor=actor, detail=detail)
        return
    now = timezone.now()  # the rows' updated_at, as save() stamps it
    for job, *_ in starts:
        check_transition(job.state, JobState.RUNNING)
    history = [
        JobTransition(
            job=job, from_state=job.state, to_state=JobState.RUNNING, at=at, reason=reason[:500], actor=actor,
            detail=detail or {},
        )
        for job, at, reason, detail in starts
    ]  # fmt: skip
    jobs_table, attempts_table = Job._meta.db_table, JobAttempt._meta.db_table
    values = ", ".join(["(%s, %s::timestamptz, %s, %s)"] * len(starts))
    params: list = []
    for job, at, reason, _ in starts:
        job.state, job.message, job.started_at, job.updated_at = JobState.RUNNING, reason[:500], at, now
        params += [job.pk, at, job.message, job.attempt]
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {jobs_table} AS j SET state = %s, updated_at = %s, message = v.message, started_at = v.at "
            f"FROM (VALUES {values}) AS v(id, at, message, attempt) WHERE j.id = v.id",
            [JobState.RUNNING, now, *params],
        )
        cursor.execute(
            f"UPDATE {attempts_table} AS a SET started_at = v.at "
            f"FROM (VALUES {values}) AS v(id, at, message, attempt) "
            "WHERE a.job_id = v.id AND a.number = v.attempt AND a.started_at IS NULL",
            params,
        )
    JobTransition.objects.bulk_create(history)


def jobs_admitted(
    *, admits: Sequence[tuple[Job, datetime, str, dict, Sequence[EnginePlacement]]], actor: str = "scheduler"
) -> None:
    """``job_transition(job=job, to_state=ADMITTED, at=at, reason=reason, actor=actor, detail=detail,
    placements=placements)`` for each ``(job, at, reason, detail, placements)`` of distinct jobs,
    written in a few statements for all of them instead of several per job (a cycle admits thousands
    when a cluster fills): the same job columns (with the job's ``gpu_model`` and ``capacity_type``
    as set on it), history rows, placement rows and attempts. Callers hold the jobs' row locks."""
    if connection.vendor != "postgresql" or len(admits) < 2:
        for job, at, reason, detail, placements in admits:
            job.save(update_fields=["gpu_model", "capacity_type"])
            job_transition(
                job=job, to_state=JobState.ADMITTED, at=at, reason=reason, actor=actor, detail=detail,
                placements=placements,
            )  # fmt: skip
        return
    for job, *_ in admits:
        check_transition(job.state, JobState.ADMITTED)
    waits_began = _waits_began([job for job, *_ in admits])
    now = timezone.now()  # the rows' updated_at, as save() stamps it
    history, live, attempts = [], [], []
    params: list = []
    for job, at, reason, detail, placements in admits:
        queued_at = waits_began[job.pk]
        history.append(
            JobTransition(
                job=job, from_state=job.state, to_state=JobState.ADMITTED, at=at, reason=reason[:500], actor=actor,
                detail=detail or {},
            )
        )  # fmt: skip
        job.state, job.message, job.updated_at = JobState.ADMITTED, reason[:500], now
        job.admitted_at, job.started_at, job.attempt = at, None, job.attempt + 1
        job.pending_reason, job.queue_position, job.estimated_start = {}, None, None
        rows, attempt = _attempt_rows(job, at=at, queued_at=queued_at, detail=detail or {}, placements=placements)
        live += rows
        attempts.append(attempt)
        params += [job.pk, at, job.message, job.attempt, job.gpu_model_id, job.capacity_type]
    values = ", ".join(["(%s, %s::timestamptz, %s, %s, %s::bigint, %s)"] * len(admits))
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Job._meta.db_table} AS j SET state = %s, updated_at = %s, message = v.message, "
            "admitted_at = v.at, started_at = NULL, attempt = v.attempt, pending_reason = '{}'::jsonb, "
            "queue_position = NULL, estimated_start = NULL, gpu_model_id = v.gpu_model, capacity_type = v.capacity "
            f"FROM (VALUES {values}) AS v(id, at, message, attempt, gpu_model, capacity) WHERE j.id = v.id",
            [JobState.ADMITTED, now, *params],
        )
    JobTransition.objects.bulk_create(history)
    ReplicaPlacement.objects.bulk_create(live)
    JobAttempt.objects.bulk_create(attempts)


def _waits_began(jobs: Sequence[Job]) -> dict[int, datetime]:
    """When the wait that ends in each job's admission began, by job id: its previous attempt's end (a
    requeue) or its submission; the attempts read in one query."""
    began = {job.pk: job.created_at for job in jobs}
    current = {(job.pk, job.attempt) for job in jobs if job.attempt}
    if current:
        rows = JobAttempt.objects.filter(job_id__in=[pk for pk, _ in current], ended_at__isnull=False)
        ends = rows.values_list("job_id", "number", "ended_at")
        began.update({job_id: ended for job_id, number, ended in ends if (job_id, number) in current and ended})
    return began


def _attempt_open(
    job: Job, *, at: datetime, queued_at: datetime, detail: dict, placements: Sequence[EnginePlacement]
) -> None:
    """Write the live placement rows and the attempt (``_attempt_rows``)."""
    live, attempt = _attempt_rows(job, at=at, queued_at=queued_at, detail=detail, placements=placements)
    ReplicaPlacement.objects.bulk_create(live)
    attempt.save()


def _attempt_rows(
    job: Job, *, at: datetime, queued_at: datetime, detail: dict, placements: Sequence[EnginePlacement]
) -> tuple[list[ReplicaPlacement], JobAttempt]:
    """The live placement rows and the attempt an admission opens, unsaved. Without placements
    (history written by hand, as the demo seeder does) the share, replicas and nodes come from the
    admission ``detail`` and then the job's request, the same fallbacks metering uses, so the attempt
    and the bill agree."""
    live = [ReplicaPlacement.from_engine(job=job, replica=index, placement=p) for index, p in enumerate(placements)]
    replicas = len(placements) or int(detail.get("replicas") or job.replicas)
    if placements:
        share = sum(placement_billed_units(p) for p in placements)
    elif detail.get("gpus") not in (None, ""):
        share = billed_units_of_gpus(detail["gpus"])
    else:
        share = billed_units(gpus=job.gpu, gpu_milli=job.gpu_milli, mig_profile=job.mig_profile or None) * replicas
    attempt = JobAttempt(
        job=job,
        number=job.attempt,
        queued_at=min(queued_at, at),
        admitted_at=at,
        gpu_model=detail.get("gpu_model") or "",
        capacity_type=detail.get("capacity_type") or "on-demand",  # as metering prices it
        borrowed=bool(detail.get("borrowed")),
        replicas=replicas,
        gpu_share_7000ths=share,
        # Summed over the placements: a Ray job's head and workers have different shapes.
        cpu_milli=sum(p.cpu_milli for p in placements) if placements else job.cpu_milli * replicas,
        memory_mib=sum(p.memory_mib for p in placements) if placements else job.memory_mib * replicas,
        nodes=sorted({p.node for p in placements} or set(detail.get("nodes") or ())),
        placements=[placement_record(index, p) for index, p in enumerate(placements)],
    )
    return live, attempt


def placement_record(replica: int, placement: EnginePlacement) -> dict:
    """One replica's placement as an attempt keeps it."""
    return {
        "replica": replica,
        "node": placement.node,
        "gpu_indices": list(placement.gpu_indices),
        "gpu_milli": placement.gpu_milli,
        "mig_profile": placement.mig_profile or "",
        "mig_slot": placement.mig_slot,
        "cpu_milli": placement.cpu_milli,
        "memory_mib": placement.memory_mib,
    }
