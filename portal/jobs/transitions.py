"""The job state machine's one write: ``job_transition``.

It imports only models and the state table, so every layer that moves a job (services, the ORM
adapter, the demo seeder) can call it without importing the services that enqueue cycles or stop
pods.
"""

from __future__ import annotations

from datetime import datetime

from portal.jobs.models import Job, JobTransition
from portal.jobs.states import JobState, check_transition


def job_transition(
    *,
    job: Job,
    to_state: str,
    at: datetime,
    reason: str = "",
    actor: str = "scheduler",
    detail: dict | None = None,
) -> Job:
    """Move a job to ``to_state`` (legal per the state table), stamp it and record the history row.

    Callers hold a row lock on the job (``select_for_update``) when racing writers are possible.
    """
    check_transition(job.state, to_state)
    from_state = job.state
    job.state = to_state
    fields = ["state", "updated_at", "message"]
    job.message = reason[:500]
    if to_state == JobState.ADMITTED:
        job.admitted_at = at
        job.attempt += 1
        job.pending_reason = {}
        job.queue_position = None
        job.estimated_start = None
        fields += ["admitted_at", "attempt", "pending_reason", "queue_position", "estimated_start"]
    elif to_state == JobState.RUNNING:
        job.started_at = at
        fields.append("started_at")
    elif to_state in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED):
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
    if to_state not in (JobState.ADMITTED, JobState.RUNNING):
        job.placements.all().delete()
    return job
