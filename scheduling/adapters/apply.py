"""Writing a cycle's plan: admissions, preemptions and pending reasons, under the cycle lock; starting
admitted jobs on the cluster."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from functools import partial

from django.conf import settings
from django.db import connection, transaction

from portal.jobs.models import GpuModel, Job
from portal.jobs.states import ACTIVE_STATES, JobState
from portal.jobs.transitions import job_transition, jobs_admitted
from scheduling.adapters.contract import (
    ClusterBackend,
    billed_capacity_type,
    node_capacity_type,
)
from scheduling.engine import model as m
from scheduling.engine.codec import reason_to_json
from scheduling.engine.shares import billed_gpus, placement_billed_units

logger = logging.getLogger(__name__)


class LostCycleLock(RuntimeError):
    """The cycle lock vanished (connection lost) before the plan was written; nothing was written."""


def placement_gpus(placements: tuple[m.ReplicaPlacement, ...]) -> Decimal:
    """GPUs held by a set of replica placements, as the bill counts them (billed shares, 6 decimals)."""
    return billed_gpus(sum(placement_billed_units(p) for p in placements))


def pending_update(rows: list[tuple[int, dict, int, datetime | None, datetime | None]]) -> None:
    """Write (id, pending reason, queue position, estimated start P50, P90) for pending jobs, only those
    rows.

    PostgreSQL: one ``UPDATE ... FROM (VALUES ...)`` per thousand rows, an order of magnitude faster
    than ``bulk_update``'s CASE expressions for the thousands of pending jobs a cycle explains.
    """
    if not rows:
        return
    if connection.vendor != "postgresql":
        jobs = []
        for job_id, reason, position, estimate, late in rows:
            job = Job(
                pk=job_id,
                pending_reason=reason,
                queue_position=position,
                estimated_start=estimate,
                estimated_start_p90=late,
            )
            jobs.append(job)
        fields = ["pending_reason", "queue_position", "estimated_start", "estimated_start_p90"]
        Job.objects.bulk_update(jobs, fields, batch_size=500)
        return
    table = Job._meta.db_table
    with connection.cursor() as cursor:
        for start in range(0, len(rows), 1000):
            chunk = rows[start : start + 1000]
            values = ", ".join(["(%s, %s::jsonb, %s, %s::timestamptz, %s::timestamptz)"] * len(chunk))
            params: list = []
            for job_id, reason, position, estimate, late in chunk:
                params += [job_id, json.dumps(reason), position, estimate, late]
            cursor.execute(
                f"UPDATE {table} AS j SET pending_reason = v.reason, queue_position = v.position, "
                "estimated_start = v.estimate, estimated_start_p90 = v.late "
                f"FROM (VALUES {values}) AS v(id, reason, position, estimate, late) "
                "WHERE j.id = v.id AND j.state = %s",
                [*params, JobState.PENDING],
            )


def plan_apply(
    *,
    plan: m.Plan,
    snapshot: m.Snapshot,
    now: datetime,
    backend: ClusterBackend,
    fence: Callable[[], bool] | None = None,
    committed: Callable[[], None] | None = None,
) -> dict[str, int]:
    """Write a plan in one transaction: evict victims, admit and place winners, store pending reasons.

    Each job row is locked and its state re-checked, so a job cancelled while the engine was thinking
    is neither admitted nor evicted. Pods are created/deleted only after the transaction commits.
    ``fence``, checked first inside the transaction, says whether the caller still holds the cycle
    lock; if not, nothing is written (another worker may be planning from a newer snapshot).
    ``committed`` is called once the transaction commits, before any pod is touched (the cycle's
    clock: the database's part of the step ends there).
    """
    nodes = {n.name: n for n in snapshot.nodes}
    gpu_models = {g.name: g for g in GpuModel.objects.all()}
    with transaction.atomic():
        if fence is not None and not fence():
            raise LostCycleLock("the cycle lock was lost before the plan was written")
        if committed is not None:
            transaction.on_commit(committed)  # registered first, so run before the pods' callbacks
        preempted = sum(preemption_apply(p, now=now, backend=backend) for p in plan.preemptions)
        started = admissions_apply(plan.admissions, now=now, nodes=nodes, gpu_models=gpu_models)
        # The admitted jobs' pods start after commit, all in one call when the backend can start many
        # at once (the Kubernetes backend creates and binds them concurrently).
        if started:
            transaction.on_commit(partial(jobs_start, backend=backend, job_ids=started))
        pending_apply(plan.pending)
    return {"admitted": len(started), "preempted": preempted, "pending": len(plan.pending)}


def jobs_start(*, backend: ClusterBackend, job_ids: list[int]) -> None:
    """Start the pods of admitted jobs: ``start_many`` where the backend has it, else one by one."""
    start_many = getattr(backend, "start_many", None)
    if start_many is not None:
        start_many(job_ids=job_ids)
        return
    for job_id in job_ids:
        backend.start(job_id=job_id)


def preemption_apply(preemption: m.Preemption, *, now: datetime, backend: ClusterBackend) -> bool:
    """Evict one victim (requeued unless its restart policy says never); False if it already left."""
    # The row lock orders this write after a concurrent cancel, which the state re-check then sees.
    job = Job.objects.select_for_update().filter(pk=int(preemption.workload_id)).first()
    if job is None or job.state not in ACTIVE_STATES:
        return False
    job_transition(job=job, to_state=JobState.PREEMPTED, at=now, reason=preemption.reason + job.resume_hint())
    if job.restart_policy == Job.RestartPolicy.REQUEUE:
        job_transition(
            job=job, to_state=JobState.PENDING, at=now, reason="requeued after preemption" + job.resume_hint()
        )
    grace_s = getattr(settings, "K8S_POD_GRACE_S", 30)
    transaction.on_commit(partial(backend.stop, job_id=job.pk, grace_s=grace_s))
    return True


def admission_apply(
    admission: m.Admission,
    *,
    now: datetime,
    nodes: dict[str, m.GpuNode],
    gpu_models: dict[str, GpuModel],
) -> bool:
    """Admit one job on its placements (``plan_apply`` starts its pods after commit); False if it is no
    longer pending."""
    return bool(admissions_apply((admission,), now=now, nodes=nodes, gpu_models=gpu_models))


def admissions_apply(
    admissions: Sequence[m.Admission],
    *,
    now: datetime,
    nodes: dict[str, m.GpuNode],
    gpu_models: dict[str, GpuModel],
) -> list[int]:
    """Admit each job on its placements, all written together (``jobs_admitted``); returns the ids of
    those admitted, in the plan's order (the others are no longer pending)."""
    # The row locks order these writes after a concurrent cancel, which the state re-check then sees;
    # taken in id order, as every locker of several job rows takes them (no deadlock between them).
    ids = [int(a.workload_id) for a in admissions]
    jobs = {job.pk: job for job in Job.objects.select_for_update().filter(pk__in=ids).order_by("pk")}
    admits = []
    for admission in admissions:
        job = jobs.get(int(admission.workload_id))
        if job is None or job.state != JobState.PENDING:
            continue
        first_node = nodes.get(admission.placements[0].node) if admission.placements else None
        capacity_type = (
            billed_capacity_type(node_capacity_type(first_node), off_peak=job.off_peak) if first_node else ""
        )
        job.gpu_model = gpu_models.get(admission.gpu_model) if admission.gpu_model else None
        job.capacity_type = capacity_type
        detail = {
            "gpu_model": admission.gpu_model or "",
            "gpus": str(placement_gpus(admission.placements)),
            "replicas": len(admission.placements),
            # All replicas together: a Ray job's head and workers differ (metering bills these).
            "cpu_milli": sum(p.cpu_milli for p in admission.placements),
            "memory_mib": sum(p.memory_mib for p in admission.placements),
            "capacity_type": capacity_type,
            "nodes": sorted({p.node for p in admission.placements}),
            "borrowed": admission.borrowed,
        }
        reason = f"admitted on {admission.gpu_model or 'CPU'}" + (
            " (borrowing from the cohort)" if admission.borrowed else ""
        )
        admits.append((job, now, reason, detail, admission.placements))
    # The placement rows and the attempts' records are written with the transitions (same transaction).
    jobs_admitted(admits=admits)
    return [job.pk for job, *_ in admits]


def pending_apply(pending: tuple[m.PendingInfo, ...]) -> None:
    """Store each pending job's reason, position and estimates, writing only the rows that changed."""
    rows = []
    infos = {int(info.workload_id): info for info in pending}
    current = Job.objects.filter(pk__in=infos, state=JobState.PENDING).values_list(
        "id", "pending_reason", "queue_position", "estimated_start", "estimated_start_p90"
    )
    for job_id, old_reason, old_position, old_estimate, old_late in current:
        info = infos[job_id]
        reason = reason_to_json(info.reason)
        estimate = _moment(info.estimated_start)
        late = _moment(info.estimated_start_p90)
        if (reason, info.position, estimate, late) != (old_reason, old_position, old_estimate, old_late):
            rows.append((job_id, reason, info.position, estimate, late))
    pending_update(rows)


def _moment(ts: float | None) -> datetime | None:
    return datetime.fromtimestamp(ts, tz=UTC) if ts is not None else None
