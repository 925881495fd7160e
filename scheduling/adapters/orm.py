"""The one boundary between Django rows and engine values: load a Snapshot, apply a Plan.

Engine ids: a workload id is the job's primary key as a string; a local queue is ``team/name``; a
cluster queue is its name; a team is its slug.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from functools import partial
from types import EllipsisType

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils.timezone import now as django_now

from portal.jobs.models import ClusterQueue, GpuModel, Job, LocalQueue, ReplicaPlacement
from portal.jobs.states import ACTIVE_STATES, JobState
from portal.jobs.transitions import job_transition
from portal.tenants.selectors import team_toleration_allowlist
from portal.tenants.tolerations import as_grant
from scheduling.adapters.contract import (
    SPOT,
    ClusterBackend,
    ClusterView,
    billed_capacity_type,
    job_tolerations,
    node_capacity_type,
    spot_toleration,
)
from scheduling.adapters.k8s.affinity import RulesError, parse_rules
from scheduling.engine import model as m
from scheduling.engine.codec import reason_to_json
from scheduling.engine.shares import billed_gpus, placement_billed_units
from scheduling.engine.windows import StartWindow, parse_span
from scheduling.models import NodePool

logger = logging.getLogger(__name__)

ENGINE_STATE = {
    JobState.PENDING: m.WorkloadState.PENDING,
    JobState.ADMITTED: m.WorkloadState.ADMITTED,
    JobState.RUNNING: m.WorkloadState.RUNNING,
}


def local_queue_key(queue: LocalQueue) -> str:
    return f"{queue.team.slug}/{queue.name}"


def _ts(value: datetime | None) -> float | None:
    return value.timestamp() if value else None


class LostCycleLock(RuntimeError):
    """The cycle lock vanished (connection lost) before the plan was written; nothing was written."""


def workload_from_job(
    job: Job, placements: list[ReplicaPlacement], rules: m.PlacementRules | EllipsisType | None = ...
) -> m.Workload:
    """The engine's view of a job row (``rules``: its placement rules when the caller has them)."""
    return m.Workload(
        id=str(job.pk),
        local_queue=local_queue_key(job.local_queue),
        team=job.team.slug,
        priority=job.priority_class.value,
        preemptible=job.priority_class.preemptible,
        min_runtime_s=float(job.priority_class.min_runtime_s),
        created_at=job.created_at.timestamp(),
        resources=m.Resources(
            gpu=job.gpu,
            gpu_milli=job.gpu_milli,
            mig_profile=job.mig_profile or None,
            gpu_memory_gib=job.gpu_memory_gib,
            cpu_milli=job.cpu_milli,
            memory_mib=job.memory_mib,
        ),
        replicas=job.replicas,
        min_available=job.min_available,
        allowed_gpu_models=tuple(sorted(g.name for g in job.allowed_gpu_models.all())),
        node_selector=m.labels_of(job.node_selector),
        tolerations=tuple(
            m.Toleration(
                key=t.get("key", ""),
                operator=t.get("operator", "Equal"),
                value=t.get("value", ""),
                effect=t.get("effect", ""),
            )
            for t in job_tolerations(job.tolerations, spot=job.spot)
        ),
        # A spot job prefers spot nodes (the cheaper capacity it opted in to), as kube-scheduler's
        # preferred node affinity would, and may still run on-demand.
        preferred_labels=((settings.CAPACITY_TYPE_LABEL, SPOT, 100),) if job.spot else (),
        rules=job_rules(job) if isinstance(rules, EllipsisType) else rules,
        runtime_s=float(job.runtime_s),
        start_window=job_start_window(job),
        state=ENGINE_STATE[JobState(job.state)],
        gpu_model=job.gpu_model.name if job.gpu_model else None,
        placements=tuple(p.engine_placement() for p in placements),
        started_at=_ts(job.started_at or job.admitted_at),
    )


def job_start_window(job: Job) -> StartWindow | None:
    """A job's start window as the engine's value: its start-after instant and its daily span (the
    off-peak hours for an off-peak job). ``None`` for a job that may start at any time."""
    span, zone = "", job.window_timezone or "UTC"
    if job.off_peak:
        span, zone = settings.OFFPEAK_HOURS, settings.OFFPEAK_TIMEZONE
    elif job.start_window:
        span = job.start_window
    if not span and job.start_after is None:
        return None
    start, end = parse_span(span) if span else (None, None)
    return StartWindow(
        not_before_s=_ts(job.start_after),
        daily_start_minute=start,
        daily_end_minute=end,
        zone=zone,
    )


def job_rules(job: Job) -> m.PlacementRules | None:
    """A job's placement rules as engine values (``None`` for the many jobs without any)."""
    return _parsed_rules(job.affinity, job.topology_spread_constraints, job.required_topology)


def _parsed_rules(affinity: object, spread: object, level: str) -> m.PlacementRules | None:
    """A row the submit path would have refused (written around it) runs nowhere rather than
    unconstrained."""
    if not affinity and not spread and not level:
        return None
    try:
        return parse_rules(affinity, spread, level)
    except RulesError as exc:
        logger.warning("a job's placement rules do not parse (%s); it matches no node", exc)
        return m.PlacementRules(required_terms=())


# job id -> (its updated_at when read, its rules). A job's rules never change after submission (an
# admin's edit saves the row, which moves updated_at): each is read and parsed once per process, not
# once per cycle, so a tenant's large rules cost the cycle nothing after the first.
_RULES_SEEN: dict[int, tuple[datetime, m.PlacementRules | None]] = {}


def jobs_rules(jobs: list[Job]) -> dict[int, m.PlacementRules | None]:
    """The placement rules of ``jobs`` (loaded without their rule columns), by job id."""
    out: dict[int, m.PlacementRules | None] = {}
    missing = []
    for job in jobs:
        seen = _RULES_SEEN.get(job.pk)
        if seen is not None and seen[0] == job.updated_at:
            out[job.pk] = seen[1]
        else:
            missing.append(job.pk)
    if missing:
        columns = ("pk", "updated_at", "affinity", "topology_spread_constraints", "required_topology")
        for pk, updated_at, affinity, spread, level in Job.objects.filter(pk__in=missing).values_list(*columns):
            out[pk] = _parsed_rules(affinity, spread, level)
            _RULES_SEEN[pk] = (updated_at, out[pk])
    if len(_RULES_SEEN) > 2 * len(jobs) + 1000:  # forget jobs that left the cycle
        for pk in set(_RULES_SEEN) - set(out):
            del _RULES_SEEN[pk]
    return out


def pools_load() -> tuple[m.NodePool, ...]:
    """The node pools platform admins configured, in matching order."""
    return tuple(
        m.NodePool(
            name=pool.name,
            node_selector=m.labels_of({str(k): str(v) for k, v in (pool.node_selector or {}).items()}),
            placement=pool.placement,
            overcommit_ratio=float(pool.overcommit_ratio),
        )
        for pool in NodePool.objects.all()
    )


def pool_descriptions() -> dict[str, str]:
    return dict(NodePool.objects.values_list("name", "description"))


def toleration_grants_load() -> tuple[tuple[str, tuple[m.TolerationGrant, ...]], ...]:
    """Every team's allow-list of tolerations (teams without a grant have an empty one), plus the spot
    taint's for every team: any job may opt in to spot capacity (``spot: true``)."""
    spot = as_grant({"key": spot_toleration()["key"]})
    return tuple((slug, (*(as_grant(g) for g in grants), spot)) for slug, grants in team_toleration_allowlist().items())


def snapshot_load(
    *, backend: ClusterView, teams_blocked: tuple[tuple[str, str], ...] = (), now: datetime | None = None
) -> m.Snapshot:
    """Read queues and live jobs from the database and nodes from the cluster backend.

    A pending job still in its back-off after a failed start (``not_before`` after ``now``) is left
    out: the engine does not consider it until the back-off is over."""
    in_backoff = Q(state=JobState.PENDING, not_before__gt=now or django_now())
    jobs = list(
        Job.objects.filter(state__in=[JobState.PENDING, *ACTIVE_STATES])
        .exclude(in_backoff)
        # What the engine never reads stays in the database: a tenant's long command and labels
        # must not make every cycle slower (they are bounded, but still 30 KB a job at most). The
        # placement rules are read once per job (``jobs_rules``), not once per cycle.
        .defer(
            "command", "labels", "image", "name", "message", "pending_reason", "affinity", "topology_spread_constraints"
        )
        .select_related("team", "local_queue__team", "priority_class", "gpu_model")
        .prefetch_related("allowed_gpu_models")
        .order_by("id")
    )
    placements: dict[int, list[ReplicaPlacement]] = defaultdict(list)
    for placement in ReplicaPlacement.objects.filter(job__state__in=ACTIVE_STATES).order_by("job_id", "replica"):
        placements[placement.job_id].append(placement)
    cluster_queues, local_queues = queues_load()
    gpu_models = list(GpuModel.objects.all())
    rules = jobs_rules(jobs)
    return m.Snapshot(
        nodes=tuple(backend.nodes()),
        cluster_queues=cluster_queues,
        local_queues=local_queues,
        workloads=tuple(workload_from_job(job, placements.get(job.pk, []), rules[job.pk]) for job in jobs),
        foreign=tuple(backend.foreign_usage()),
        teams_blocked=teams_blocked,
        mig_profiles=tuple((g.name, tuple(g.mig_profiles or ())) for g in gpu_models),
        gpu_memory_gib=tuple((g.name, g.memory_gib) for g in gpu_models),
        pools=pools_load(),
        toleration_grants=toleration_grants_load(),
    )


def queues_load() -> tuple[tuple[m.ClusterQueue, ...], tuple[m.LocalQueue, ...]]:
    """Every ClusterQueue (quotas per GPU model, in flavor order) and LocalQueue, as engine values."""
    cluster_queues = tuple(
        m.ClusterQueue(
            name=cq.name,
            cohort=cq.cohort,
            flavors=tuple(
                m.FlavorQuota(
                    gpu_model=f.gpu_model.name,
                    nominal_gpus=f.nominal_gpus,
                    borrowing_limit=f.borrowing_limit,
                    lending_limit=f.lending_limit,
                )
                for f in cq.flavors.all()
            ),
            cpu_milli=cq.cpu_quota_milli,
            memory_mib=cq.memory_quota_mib,
            weight=cq.weight,
        )
        for cq in ClusterQueue.objects.prefetch_related("flavors__gpu_model")
    )
    local_queues = tuple(
        m.LocalQueue(
            name=local_queue_key(lq),
            team=lq.team.slug,
            cluster_queue=lq.cluster_queue.name,
            weight=lq.weight,
            max_pending=lq.max_pending_jobs,
        )
        for lq in LocalQueue.objects.select_related("team", "cluster_queue")
    )
    return cluster_queues, local_queues


def placement_gpus(placements: tuple[m.ReplicaPlacement, ...]) -> Decimal:
    """GPUs held by a set of replica placements, as the bill counts them (billed shares, 6 decimals)."""
    return billed_gpus(sum(placement_billed_units(p) for p in placements))


def pending_update(rows: list[tuple[int, dict, int, datetime | None]]) -> None:
    """Write (id, pending reason, queue position, estimated start) for pending jobs, only those rows.

    PostgreSQL: one ``UPDATE ... FROM (VALUES ...)`` per thousand rows, an order of magnitude faster
    than ``bulk_update``'s CASE expressions for the thousands of pending jobs a cycle explains.
    """
    if not rows:
        return
    if connection.vendor != "postgresql":
        jobs = []
        for job_id, reason, position, estimate in rows:
            job = Job(pk=job_id, pending_reason=reason, queue_position=position, estimated_start=estimate)
            jobs.append(job)
        Job.objects.bulk_update(jobs, ["pending_reason", "queue_position", "estimated_start"], batch_size=500)
        return
    table = Job._meta.db_table
    with connection.cursor() as cursor:
        for start in range(0, len(rows), 1000):
            chunk = rows[start : start + 1000]
            values = ", ".join(["(%s, %s::jsonb, %s, %s::timestamptz)"] * len(chunk))
            params: list = []
            for job_id, reason, position, estimate in chunk:
                params += [job_id, json.dumps(reason), position, estimate]
            cursor.execute(
                f"UPDATE {table} AS j SET pending_reason = v.reason, queue_position = v.position, "
                f"estimated_start = v.estimate FROM (VALUES {values}) AS v(id, reason, position, estimate) "
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
) -> dict[str, int]:
    """Write a plan in one transaction: evict victims, admit and place winners, store pending reasons.

    Each job row is locked and its state re-checked, so a job cancelled while the engine was thinking
    is neither admitted nor evicted. Pods are created/deleted only after the transaction commits.
    ``fence``, checked first inside the transaction, says whether the caller still holds the cycle
    lock; if not, nothing is written (another worker may be planning from a newer snapshot).
    """
    nodes = {n.name: n for n in snapshot.nodes}
    gpu_models = {g.name: g for g in GpuModel.objects.all()}
    with transaction.atomic():
        if fence is not None and not fence():
            raise LostCycleLock("the cycle lock was lost before the plan was written")
        preempted = sum(preemption_apply(p, now=now, backend=backend) for p in plan.preemptions)
        admitted = sum(
            admission_apply(a, now=now, backend=backend, nodes=nodes, gpu_models=gpu_models) for a in plan.admissions
        )
        pending_apply(plan.pending)
    return {"admitted": admitted, "preempted": preempted, "pending": len(plan.pending)}


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
    backend: ClusterBackend,
    nodes: dict[str, m.GpuNode],
    gpu_models: dict[str, GpuModel],
) -> bool:
    """Admit one job on its placements (its pods start after commit); False if it is no longer pending."""
    # The row lock orders this write after a concurrent cancel, which the state re-check then sees.
    job = Job.objects.select_for_update().filter(pk=int(admission.workload_id)).first()
    if job is None or job.state != JobState.PENDING:
        return False
    first_node = nodes.get(admission.placements[0].node) if admission.placements else None
    capacity_type = billed_capacity_type(node_capacity_type(first_node), off_peak=job.off_peak) if first_node else ""
    job.gpu_model = gpu_models.get(admission.gpu_model) if admission.gpu_model else None
    job.capacity_type = capacity_type
    job.save(update_fields=["gpu_model", "capacity_type"])
    detail = {
        "gpu_model": admission.gpu_model or "",
        "gpus": str(placement_gpus(admission.placements)),
        "replicas": len(admission.placements),
        "capacity_type": capacity_type,
        "nodes": sorted({p.node for p in admission.placements}),
        "borrowed": admission.borrowed,
    }
    reason = f"admitted on {admission.gpu_model or 'CPU'}" + (
        " (borrowing from the cohort)" if admission.borrowed else ""
    )
    # The placement rows and the attempt's record are written with the transition (same transaction).
    job_transition(
        job=job, to_state=JobState.ADMITTED, at=now, reason=reason, detail=detail, placements=admission.placements
    )
    transaction.on_commit(partial(backend.start, job_id=job.pk))
    return True


def pending_apply(pending: tuple[m.PendingInfo, ...]) -> None:
    """Store each pending job's reason, position and estimate, writing only the rows that changed."""
    rows = []
    infos = {int(info.workload_id): info for info in pending}
    current = Job.objects.filter(pk__in=infos, state=JobState.PENDING).values_list(
        "id", "pending_reason", "queue_position", "estimated_start"
    )
    for job_id, old_reason, old_position, old_estimate in current:
        info = infos[job_id]
        reason = reason_to_json(info.reason)
        estimate = datetime.fromtimestamp(info.estimated_start, tz=UTC) if info.estimated_start is not None else None
        if (reason, info.position, estimate) != (old_reason, old_position, old_estimate):
            rows.append((job_id, reason, info.position, estimate))
    pending_update(rows)
