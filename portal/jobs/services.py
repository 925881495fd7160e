"""Writes that touch jobs and queues. Views, serializers, tasks and the admin call these; they hold the rules."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from types import EllipsisType
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from billing.selectors.jobs import PlannedCost, planned_cost
from portal.jobs.errors import BROKER_ERRORS, ServiceError
from portal.jobs.models import (
    ClusterQueue,
    FlavorQuota,
    GpuModel,
    IdempotencyKey,
    Job,
    JobTransition,
    LocalQueue,
    PriorityClass,
    QuotaChange,
)
from portal.jobs.spec import (  # noqa: F401  (the names callers import from here: the request's)
    MAX_COMMAND_ARGS,
    MAX_CPU_MILLI,
    MAX_GPU_MEMORY_GIB,
    MAX_LABELS,
    MAX_MEMORY_MIB,
    MAX_NODE_SELECTOR,
    MAX_RUNTIME_S,
    MAX_TOLERATIONS,
    SPEC_FIELDS,
    JobSpec,
    job_spec_validate,
    label_problem,
    never_fits_error,
)
from portal.jobs.states import ACTIVE_STATES, CANCELLABLE_STATES, FINAL_STATES, IllegalTransition, JobState
from portal.jobs.transitions import job_transition
from portal.ops.models import AuditEntry
from portal.ops.services import audit_record
from portal.tenants.selectors import user_is_team_admin
from scheduling.adapters.factory import cluster_backend
from scheduling.adapters.workloads import workload_from_request
from scheduling.dry_run import JobCheck, job_check
from scheduling.engine import model as engine
from scheduling.engine.admission import pending_limit_error
from scheduling.engine.model import LocalQueue as EngineLocalQueue
from scheduling.engine.quota import models_to_try
from scheduling.engine.shares import billed_units, placement_billed_units
from scheduling.selectors import job_never_fits
from scheduling.services import cycle_request_claim
from scheduling.tasks import scheduling_cycle_task

logger = logging.getLogger(__name__)


def job_submit(*, owner, spec: JobSpec, at: datetime | None = None, request_cycle: bool = True) -> Job:
    """Create a Pending job, enforcing the local queue's max pending jobs, and schedule a cycle
    (``job_submit_recorded``, without its transition)."""
    return job_submit_recorded(owner=owner, spec=spec, at=at, request_cycle=request_cycle)[0]


def job_submit_recorded(
    *, owner, spec: JobSpec, at: datetime | None = None, request_cycle: bool = True
) -> tuple[Job, JobTransition]:
    """Create a Pending job, enforcing the local queue's max pending jobs, and schedule a cycle; the
    job and its first transition (what the submit answer shows without reading them back).

    A job that never fits the cluster as configured (``scheduling.engine.verdict``) is refused with a
    400 naming the limit, unless ``QUEUE_NEVER_FITTING_JOBS`` lets it queue (clusters that autoscale).
    The row of a queue with a pending limit is locked so two concurrent submissions cannot both take
    the last pending slot; submissions to a queue without one do not wait for each other.
    """
    job_spec_validate(spec)
    now = at or timezone.now()
    with transaction.atomic():
        queue = LocalQueue.objects.get(pk=spec.local_queue.pk)
        if queue.max_pending_jobs is not None:
            # Locked, then read again: the count below and this insert are one step for the limit. A
            # limit set after the unlocked read orders this submission before the change.
            queue = LocalQueue.objects.select_for_update().get(pk=queue.pk)
        if queue.max_pending_jobs is not None:
            pending = Job.objects.filter(local_queue=queue, state=JobState.PENDING).count()
            engine_queue = EngineLocalQueue(
                name=queue.name, team=spec.team.slug, cluster_queue="", max_pending=queue.max_pending_jobs
            )
            if error := pending_limit_error(engine_queue, pending):
                raise ServiceError(error, field="queue", status_code=409)
        job = Job.objects.create(owner=owner, **spec.row())
        if at is not None:
            Job.objects.filter(pk=job.pk).update(created_at=at)
            job.created_at = at
        if spec.allowed_gpu_models:
            job.allowed_gpu_models.set(spec.allowed_gpu_models)
        if not settings.QUEUE_NEVER_FITTING_JOBS:
            models = tuple(m.name for m in spec.allowed_gpu_models)
            never = job_never_fits(job=job, allowed_gpu_models=models)
        else:
            never = None
        if never is not None:
            raise never_fits_error(never, spec)  # rolls the job back
        transition = JobTransition.objects.create(
            job=job,
            from_state="",
            to_state=JobState.PENDING,
            at=now,
            reason="submitted",
            actor=owner.username,
        )
        if request_cycle:
            transaction.on_commit(_request_cycle)
    return job, transition


def _request_cycle() -> None:
    """Ask for a cycle now, best effort. It runs after the write committed, so a broker outage must
    not turn the committed write into an error (a client would retry and submit twice): beat's next
    periodic cycle picks the change up."""
    try:
        request = cycle_request_claim()
        if request is not None:  # else a cycle already queued and not started covers this write
            # Started a while later (CYCLE_BATCH_S, more after a costly cycle), so a burst of
            # submissions shares one cycle (each reads every pending job: running one per submission
            # keeps a worker busy for nothing).
            scheduling_cycle_task.apply_async(
                kwargs={"requested": request.generation}, countdown=request.countdown_s or None
            )
    except BROKER_ERRORS as exc:
        logger.warning("could not enqueue a scheduling cycle (%s); the next periodic cycle will run it", exc)


def idempotent_submit(
    *, owner, key: str, fingerprint: str, submit: Callable[[], tuple[int, dict]], now: datetime | None = None
) -> tuple[int, dict, bool]:
    """Run ``submit`` (which answers ``(status, body)``) at most once per user and ``Idempotency-Key``.

    Returns ``(status, body, replayed)``. Within ``IDEMPOTENCY_TTL_S`` the same key and body get the
    first answer again; the same key with another body is a 422 naming the header. A submission
    that fails (4xx) leaves no trace, so the key can be used again.
    """
    now = now or timezone.now()
    with transaction.atomic():
        record = IdempotencyKey.objects.select_for_update().filter(user=owner, key=key).first()
        if record is not None and record.created_at < now - timedelta(seconds=settings.IDEMPOTENCY_TTL_S):
            record.delete()
            record = None
        if record is None:
            try:
                # The unique (user, key) index serializes two racing requests with one key: the second
                # insert waits for the first transaction, then fails, and the second replays the first.
                with transaction.atomic():
                    record = IdempotencyKey.objects.create(user=owner, key=key, fingerprint=fingerprint, created_at=now)
            except IntegrityError:
                record = IdempotencyKey.objects.select_for_update().get(user=owner, key=key)
            else:
                status_code, body = submit()
                record.status_code, record.response = status_code, body
                record.job_id = body.get("id") if isinstance(body, dict) else None
                record.save(update_fields=["status_code", "response", "job"])
                return status_code, body, False
        if record.fingerprint != fingerprint:
            raise ServiceError(
                "this key was used with a different request body; use a new key for a new job",
                field="Idempotency-Key",
                status_code=422,
            )
        return record.status_code or 201, record.response, True


def job_cancel(*, job: Job, by, at: datetime | None = None) -> Job:
    """Cancel a job that has not finished; its pods are deleted by the cluster backend.

    The job's owner, a team-admin of its team, or a platform admin may cancel it.
    """
    if job.owner_id != by.pk and not user_is_team_admin(user=by, team=job.team):
        raise ServiceError("only the job's owner or an admin of its team can cancel it", status_code=403)

    now = at or timezone.now()
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job.pk)
        if job.state not in CANCELLABLE_STATES:
            raise ServiceError(f"a {job.state} job cannot be cancelled", field="state", status_code=409)
        held_capacity = job.holds_capacity
        try:
            job_transition(job=job, to_state=JobState.CANCELLED, at=now, reason="cancelled", actor=by.username)
        except IllegalTransition as exc:  # pragma: no cover - guarded above
            raise ServiceError(str(exc), field="state", status_code=409) from exc
        if held_capacity:
            # Best effort after the commit (robust: a cluster API error is logged, not raised): the
            # cycle's reconcile deletes the pods of a cancelled job if this call fails.
            transaction.on_commit(partial(_stop_pods, job_id=job.pk), robust=True)
        transaction.on_commit(_request_cycle)
    return job


REQUEUABLE_STATES = frozenset(s for s in (*ACTIVE_STATES, JobState.PREEMPTED))


def _staff_only(by, what: str) -> None:
    if not getattr(by, "is_staff", False):
        raise ServiceError(f"only platform admins {what}", status_code=403)


def job_admin_cancel(*, job: Job, by, at: datetime | None = None) -> Job:
    """A platform admin cancels a job (as :func:`job_cancel`), recorded in the audit trail."""
    _staff_only(by, "cancel other teams' jobs from the admin")
    with transaction.atomic():
        before = job.state
        job = job_cancel(job=job, by=by, at=at)
        audit_record(
            by=by, action=AuditEntry.Action.JOB_CANCEL, target_type="job", target_id=job.pk, target=str(job),
            field="state", old=before, new=job.state, at=at,
        )  # fmt: skip
    return job


def job_requeue(*, job: Job, by, at: datetime | None = None) -> Job:
    """Send an admitted, running or preempted job back to its queue (its pods are stopped; its next
    admission is a new attempt). Platform admins only; recorded in the audit trail."""
    _staff_only(by, "requeue jobs")
    now = at or timezone.now()
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job.pk)  # orders this after a racing cancel or admission
        if job.state not in REQUEUABLE_STATES:
            raise ServiceError(f"a {job.state} job cannot be requeued", field="state", status_code=409)
        before = job.state
        held_capacity = job.holds_capacity
        job_transition(job=job, to_state=JobState.PENDING, at=now, reason="requeued by an admin", actor=by.username)
        audit_record(
            by=by, action=AuditEntry.Action.JOB_REQUEUE, target_type="job", target_id=job.pk, target=str(job),
            field="state", old=before, new=job.state, at=now,
        )  # fmt: skip
        if held_capacity:
            transaction.on_commit(partial(_stop_pods, job_id=job.pk), robust=True)
        transaction.on_commit(_request_cycle)
    return job


def job_priority_update(*, job: Job, by, priority_class: PriorityClass, at: datetime | None = None) -> Job:
    """Move a job that has not finished to another priority class (it is ranked by it from the next
    cycle on). Platform admins only; recorded in the audit trail like a quota change."""
    _staff_only(by, "change job priorities")
    with transaction.atomic():
        job = Job.objects.select_for_update().select_related("priority_class").get(pk=job.pk)
        if job.state in FINAL_STATES:
            raise ServiceError(f"a {job.state} job keeps its priority", field="state", status_code=409)
        before = job.priority_class
        if before.pk == priority_class.pk:
            return job
        job.priority_class = priority_class
        job.save(update_fields=["priority_class", "updated_at"])
        audit_record(
            by=by, action=AuditEntry.Action.JOB_PRIORITY, target_type="job", target_id=job.pk, target=str(job),
            field="priority_class", old=before, new=priority_class, at=at,
        )  # fmt: skip
        transaction.on_commit(_request_cycle)
    return job


@dataclass
class BulkResult:
    done: list[int] = field(default_factory=list)
    refused: list[tuple[int, str]] = field(default_factory=list)  # (job id, why)


def jobs_bulk_apply(*, jobs, by, action: Callable[[Job], object]) -> BulkResult:
    """Apply ``action`` (one of the services above, bound to ``by``) to each job in its own
    transaction: one job that cannot take it is reported, the others still do."""
    result = BulkResult()
    for job in jobs:
        try:
            action(job)
        except ServiceError as exc:
            result.refused.append((job.pk, exc.message))
        else:
            result.done.append(job.pk)
    return result


def _stop_pods(*, job_id: int) -> None:
    cluster_backend().stop(job_id=job_id, grace_s=30)


QUOTA_FIELDS = ("nominal_gpus", "borrowing_limit", "lending_limit")


def _fmt(value) -> str:
    return "" if value is None else str(value)


def queue_quota_update(
    *,
    cluster_queue: ClusterQueue,
    by,
    cpu_quota_milli: int | EllipsisType | None = ...,
    memory_quota_mib: int | EllipsisType | None = ...,
    flavors: dict[str, dict[str, int | None]] | None = None,
) -> list[QuotaChange]:
    """Change a ClusterQueue's quotas and record each change (who, when, old → new).

    ``flavors`` maps a GPU model name to the fields to set (nominal_gpus, borrowing_limit, lending_limit);
    a model the queue has no quota for yet gets one. Only platform admins may call this.
    """
    if not getattr(by, "is_staff", False):
        raise ServiceError("only platform admins edit quotas", status_code=403)
    with transaction.atomic():
        cq = ClusterQueue.objects.select_for_update().get(pk=cluster_queue.pk)
        before = quota_state(cq)
        if not isinstance(cpu_quota_milli, EllipsisType):
            cq.cpu_quota_milli = cpu_quota_milli
        if not isinstance(memory_quota_mib, EllipsisType):
            cq.memory_quota_mib = memory_quota_mib
        cq.save()
        for model_name, values in (flavors or {}).items():
            try:
                gpu_model = GpuModel.objects.get(name=model_name)
            except GpuModel.DoesNotExist:
                raise ServiceError(f"unknown GPU model {model_name!r}", field="flavors") from None
            unknown = sorted(set(values) - set(QUOTA_FIELDS))
            if unknown:
                raise ServiceError(f"unknown quota field {unknown[0]!r}", field="flavors")
            flavor, _ = FlavorQuota.objects.get_or_create(cluster_queue=cq, gpu_model=gpu_model)
            for key, value in values.items():
                setattr(flavor, key, value)
            flavor.save()
        # One mechanism for the API and the admin: diff the quota state before and after, record the changes.
        return quota_changes_record(by=by, before=before, after=quota_state(cq), cluster_queue=cq)


def quota_changes_record(*, by, before: dict[str, object], after: dict[str, object], cluster_queue: ClusterQueue):
    """Record the difference between two quota snapshots (used by the admin's form save)."""
    rows = [
        QuotaChange(
            cluster_queue=cluster_queue,
            field=key,
            old_value=_fmt(before.get(key)),
            new_value=_fmt(after.get(key)),
            changed_by=by,
        )
        for key in sorted(set(before) | set(after))
        if before.get(key) != after.get(key)
    ]
    QuotaChange.objects.bulk_create(rows)
    for row in rows:
        audit_record(
            by=by, action=AuditEntry.Action.QUOTA_CHANGE, target_type="cluster queue", target_id=cluster_queue.pk,
            target=cluster_queue.name, field=row.field, old=row.old_value, new=row.new_value,
        )  # fmt: skip
    return rows


def quota_state(cluster_queue: ClusterQueue) -> dict[str, object]:
    """The quota-relevant fields of a ClusterQueue as a flat dict (for change recording)."""
    state: dict[str, object] = {
        "cpu_quota_milli": cluster_queue.cpu_quota_milli,
        "memory_quota_mib": cluster_queue.memory_quota_mib,
    }
    for flavor in FlavorQuota.objects.filter(cluster_queue=cluster_queue).select_related("gpu_model"):
        for key in QUOTA_FIELDS:
            state[f"{flavor.gpu_model.name} {key}"] = getattr(flavor, key)
    return state


# -- the dry run --------------------------------------------------------------------------------------

DRY_RUN_ID = "dry-run"  # the unsubmitted job's id in the engine (no job row has it)


def workload_from_spec(spec: JobSpec, *, now: datetime) -> engine.Workload:
    """The engine's view of a job request that is not submitted (as the cycle reads a submitted one)."""
    row = Job(**spec.row())  # unsaved: the request's columns, read as a job's
    return workload_from_request(
        row, pk=DRY_RUN_ID, now=now, allowed_gpu_models=tuple(m.name for m in spec.allowed_gpu_models)
    )


@dataclass(frozen=True, slots=True)
class SpecCheck:
    """A dry run of a job request: the engine's answer, its estimated cost, the jobs it would preempt."""

    answer: JobCheck
    cost: PlannedCost | None
    victims: tuple[Job, ...]
    suggestion_changes: tuple[dict[str, Any], ...]  # each suggestion's change in the spec's words
    runs_until_stopped: bool = False  # ``Job.runs_until_stopped``: ``cost`` is one hour's, it has no end


def job_check_spec(*, spec: JobSpec, now: datetime | None = None) -> SpecCheck:
    """Dry run of a job request (the submit body): validated as ``job_submit`` validates it, then
    answered by the engine on the current state (``scheduling.dry_run.job_check``) and priced from
    the price book on the GPU model and capacity type it would get, for its expected runtime.
    Nothing is written."""
    job_spec_validate(spec)
    now = now or timezone.now()
    workload = workload_from_spec(spec, now=now)
    answer = job_check(workload=workload)
    cost = None
    if answer.check.verdict != "never":
        cost = _check_cost(spec, workload, answer, now)
    victims: tuple[Job, ...] = ()
    if answer.check.preempts:
        victims = tuple(Job.objects.filter(pk__in=[int(v) for v in answer.check.preempts]).select_related("team"))
    changes = tuple(_spec_change(dict(s.change)) for s in answer.suggestions)
    return SpecCheck(answer, cost, victims, changes, Job.kind_runs_until_stopped(spec.kind))


def _check_cost(spec: JobSpec, workload: engine.Workload, answer: JobCheck, now: datetime) -> PlannedCost | None:
    check = answer.check
    if check.placements:
        share = sum(placement_billed_units(p) for p in check.placements)
        cpu_milli = sum(p.cpu_milli for p in check.placements)
        memory_mib = sum(p.memory_mib for p in check.placements)
        model = check.gpu_model or ""
    else:  # waits without a forecast start: priced on the first GPU model its queue would try
        flavors = tuple(f.gpu_model.name for f in spec.local_queue.cluster_queue.flavors.select_related("gpu_model"))
        tried = models_to_try(workload, flavors)
        model = tried[0] or "" if tried else ""
        if spec.gpu_memory_gib:
            return None  # its GPU count depends on the model's memory: known once placed
        share = billed_units(gpus=spec.gpu, gpu_milli=spec.gpu_milli, mig_profile=spec.mig_profile or None)
        share *= spec.replicas
        cpu_milli, memory_mib = spec.cpu_milli * spec.replicas, spec.memory_mib * spec.replicas
        for pod_set in workload.pod_sets:  # a Ray job's worker groups (whole GPUs)
            share += billed_units(gpus=pod_set.resources.gpu) * pod_set.replicas
            cpu_milli += pod_set.resources.cpu_milli * pod_set.replicas
            memory_mib += pod_set.resources.memory_mib * pod_set.replicas
    start = now
    if check.estimated_start_p50 is not None:
        start = max(now, datetime.fromtimestamp(check.estimated_start_p50, tz=now.tzinfo))
    # A job that runs until stopped has no end to price to: one hour of it (its rate), as its page shows.
    runtime_s = _HOUR_S if Job.kind_runs_until_stopped(spec.kind) else check.runtime_s
    return planned_cost(
        gpu_model=model,
        capacity_type=answer.capacity_type,
        gpu_share_7000ths=share,
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        start=start,
        runtime_s=runtime_s,
    )


_HOUR_S = 3600.0


def _spec_change(change: dict[str, Any]) -> dict[str, Any]:
    """A suggestion's change in the submit body's words (lists, not tuples)."""
    return {key: list(value) if isinstance(value, tuple) else value for key, value in change.items()}
