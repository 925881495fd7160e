"""The one boundary between Django rows and engine values: load a Snapshot, apply a Plan.

Engine ids: a workload id is the job's primary key as a string; a local queue is ``team/name``; a
cluster queue is its name; a team is its slug.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from functools import partial
from types import EllipsisType

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q, QuerySet
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
from scheduling.adapters.k8s.ray import pod_sets as ray_pod_sets
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


# The job columns (and related names) a workload is built from: one list for both paths below, the
# snapshot's rows (``values_list``) and a single model instance (``workload_from_job``).
WORKLOAD_COLUMNS = (
    "id", "local_queue__team__slug", "local_queue__name", "team__slug", "priority_class__value",
    "priority_class__preemptible", "priority_class__min_runtime_s", "created_at", "gpu", "gpu_milli",
    "mig_profile", "gpu_memory_gib",
    "cpu_milli", "memory_mib", "replicas", "min_available", "runtime_s", "state", "gpu_model__name",
    "started_at", "admitted_at", "updated_at",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class JobSpecPart:
    """What a workload carries from a job's spec that never changes after submission: parsed once per
    job (``jobs_spec_parts``), not once per cycle, so a tenant's large specs cost the cycle nothing
    after the first."""

    node_selector: m.Labels
    tolerations: tuple[m.Toleration, ...]
    rules: m.PlacementRules | None
    start_window: StartWindow | None
    preferred_labels: tuple[tuple[str, str, int], ...] = ()
    pod_sets: tuple[m.PodSet, ...] = ()  # a Ray job's worker groups
    kind: str = ""  # the job's kind ("" for batch): the serving preemption rule reads it


# The job columns ``spec_part`` reads besides the placement rules, in its arguments' order.
SPEC_COLUMNS = (
    "node_selector", "tolerations", "spot", "start_after", "start_window", "window_timezone", "off_peak", "ray",
    "kind",
)  # fmt: skip


def spec_part(
    node_selector: dict | None,
    tolerations: list | None,
    spot: bool,
    start_after: datetime | None,
    start_window: str,
    window_timezone: str,
    off_peak: bool,
    ray: dict | None = None,
    kind: str = "",
    *,
    rules: m.PlacementRules | None,
) -> JobSpecPart:
    sets = ray_pod_sets(ray)
    if sets is None:  # a Ray spec the submit path would have refused runs nowhere (as broken rules do)
        logger.warning("a job's Ray spec does not parse; it matches no node")
        rules = m.PlacementRules(required_terms=())
    return JobSpecPart(
        node_selector=m.labels_of(node_selector),
        tolerations=tuple(
            m.Toleration(
                key=t.get("key", ""),
                operator=t.get("operator", "Equal"),
                value=t.get("value", ""),
                effect=t.get("effect", ""),
            )
            for t in job_tolerations(tolerations or [], spot=spot)
        ),
        rules=rules,
        start_window=start_window_of(start_after, start_window, window_timezone, off_peak),
        # A spot job prefers spot nodes (the cheaper capacity it opted in to), as kube-scheduler's
        # preferred node affinity would, and may still run on-demand.
        preferred_labels=((settings.CAPACITY_TYPE_LABEL, SPOT, 100),) if spot else (),
        pod_sets=sets or (),
        kind="" if kind == Job.Kind.BATCH else kind,
    )


def workload_from_row(
    row: tuple, *, allowed_gpu_models: tuple[str, ...], spec: JobSpecPart, placements: tuple[m.ReplicaPlacement, ...]
) -> m.Workload:
    """The engine's view of a job from its ``WORKLOAD_COLUMNS`` values."""
    (
        pk, queue_team, queue_name, team, priority, preemptible, min_runtime_s, created_at, gpu, gpu_milli, mig_profile,
        gpu_memory_gib, cpu_milli, memory_mib, replicas, min_available, runtime_s, state, gpu_model,
        started_at, admitted_at, _updated_at,
    ) = row  # fmt: skip
    return m.Workload(
        id=str(pk),
        local_queue=f"{queue_team}/{queue_name}",
        team=team,
        priority=priority,
        preemptible=preemptible,
        min_runtime_s=float(min_runtime_s),
        created_at=created_at.timestamp(),
        resources=m.Resources(
            gpu=gpu,
            gpu_milli=gpu_milli,
            mig_profile=mig_profile or None,
            gpu_memory_gib=gpu_memory_gib,
            cpu_milli=cpu_milli,
            memory_mib=memory_mib,
        ),
        replicas=replicas,
        min_available=min_available,
        allowed_gpu_models=allowed_gpu_models,
        node_selector=spec.node_selector,
        tolerations=spec.tolerations,
        preferred_labels=spec.preferred_labels,
        rules=spec.rules,
        runtime_s=float(runtime_s),
        start_window=spec.start_window,
        state=ENGINE_STATE[JobState(state)],
        gpu_model=gpu_model,
        placements=placements,
        started_at=_ts(started_at or admitted_at),
        pod_sets=spec.pod_sets,
        kind=spec.kind,
    )


def workload_from_job(
    job: Job, placements: list[ReplicaPlacement], rules: m.PlacementRules | EllipsisType | None = ...
) -> m.Workload:
    """The engine's view of a job row (``rules``: its placement rules when the caller has them)."""
    return _workload_of(
        job,
        pk=job.pk,
        created_at=job.created_at,
        allowed_gpu_models=tuple(sorted(g.name for g in job.allowed_gpu_models.all())),
        rules=job_rules(job) if rules is ... else rules,
        placements=tuple(p.engine_placement() for p in placements),
    )


def workload_from_request(job: Job, *, pk: str, now: datetime, allowed_gpu_models: tuple[str, ...]) -> m.Workload:
    """The engine's view of a job request that is not saved (a dry run): ``job`` is an unsaved row
    with the request's columns, submitted ``now``."""
    return _workload_of(
        job, pk=pk, created_at=now, allowed_gpu_models=tuple(sorted(allowed_gpu_models)), rules=job_rules(job)
    )


def _workload_of(
    job: Job,
    *,
    pk: object,
    created_at: datetime,
    allowed_gpu_models: tuple[str, ...],
    rules: m.PlacementRules | None,
    placements: tuple[m.ReplicaPlacement, ...] = (),
) -> m.Workload:
    row = (
        pk, job.local_queue.team.slug, job.local_queue.name, job.team.slug, job.priority_class.value,
        job.priority_class.preemptible, job.priority_class.min_runtime_s, created_at, job.gpu, job.gpu_milli,
        job.mig_profile, job.gpu_memory_gib, job.cpu_milli, job.memory_mib, job.replicas, job.min_available,
        job.runtime_s,
        job.state, job.gpu_model.name if job.gpu_model else None, job.started_at, job.admitted_at, job.updated_at,
    )  # fmt: skip
    return workload_from_row(
        row,
        allowed_gpu_models=allowed_gpu_models,
        spec=spec_part(*(getattr(job, name) for name in SPEC_COLUMNS), rules=rules),
        placements=placements,
    )


def job_start_window(job: Job) -> StartWindow | None:
    """A job's start window as the engine's value: its start-after instant and its daily span (the
    off-peak hours for an off-peak job). ``None`` for a job that may start at any time."""
    return start_window_of(job.start_after, job.start_window, job.window_timezone, job.off_peak)


def start_window_of(
    start_after: datetime | None, start_window: str, window_timezone: str, off_peak: bool
) -> StartWindow | None:
    """``job_start_window`` from the column values."""
    span, zone = "", window_timezone or "UTC"
    if off_peak:
        span, zone = settings.OFFPEAK_HOURS, settings.OFFPEAK_TIMEZONE
    elif start_window:
        span = start_window
    if not span and start_after is None:
        return None
    start, end = parse_span(span) if span else (None, None)
    return StartWindow(
        not_before_s=_ts(start_after),
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


# job id -> (its updated_at when read, its spec part). A job's spec never changes after submission (an
# admin's edit saves the row, which moves updated_at): each is read and parsed once per process.
_SPECS_SEEN: dict[int, tuple[datetime, JobSpecPart]] = {}


def jobs_spec_parts(seen: list[tuple[int, datetime]]) -> dict[int, JobSpecPart]:
    """The spec parts (node selector, tolerations, placement rules) of jobs ``(id, updated_at)``, by id."""
    out: dict[int, JobSpecPart] = {}
    missing = []
    for pk, updated_at in seen:
        cached = _SPECS_SEEN.get(pk)
        if cached is not None and cached[0] == updated_at:
            out[pk] = cached[1]
        else:
            missing.append(pk)
    columns = ("pk", "updated_at", "affinity", "topology_spread_constraints", "required_topology", *SPEC_COLUMNS)
    for start in range(0, len(missing), 1000):
        chunk = missing[start : start + 1000]
        for pk, updated_at, affinity, spread, level, *values in Job.objects.filter(pk__in=chunk).values_list(*columns):
            out[pk] = spec_part(*values, rules=_parsed_rules(affinity, spread, level))
            _SPECS_SEEN[pk] = (updated_at, out[pk])
    if len(_SPECS_SEEN) > 2 * len(seen) + 1000:  # forget jobs that left the cycle
        for pk in set(_SPECS_SEEN) - set(out):
            del _SPECS_SEEN[pk]
    return out


def jobs_rules(jobs: list[Job]) -> dict[int, m.PlacementRules | None]:
    """The placement rules of ``jobs`` by id, read once per job as ``jobs_spec_parts`` reads them."""
    parts = jobs_spec_parts([(job.pk, job.updated_at) for job in jobs])
    return {pk: part.rules for pk, part in parts.items()}


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


def allowed_models_of(jobs: QuerySet[Job]) -> dict[int, list[str]]:
    """Job id -> the GPU models it allows (sorted), by a join on ``jobs``' filter."""
    allowed: dict[int, list[str]] = defaultdict(list)
    through = Job.allowed_gpu_models.through.objects.filter(job__in=jobs.values("pk"))
    for job_id, name in through.order_by("job_id", "gpumodel__name").values_list("job_id", "gpumodel__name"):
        allowed[job_id].append(name)
    return allowed


def recent_load(*, since: datetime) -> tuple[m.Workload, ...]:
    """The jobs submitted after ``since``, in any state, as pending workloads: the forecast expects
    their like again (``Snapshot.recent``)."""
    jobs = Job.objects.filter(created_at__gt=since)
    rows = list(jobs.order_by("id").values_list(*WORKLOAD_COLUMNS))
    allowed = allowed_models_of(jobs)
    specs = jobs_spec_parts([(row[0], row[-1]) for row in rows])
    state = WORKLOAD_COLUMNS.index("state")
    return tuple(
        workload_from_row(
            (*row[:state], JobState.PENDING, None, None, None, row[-1]),
            allowed_gpu_models=tuple(allowed.get(row[0], ())),
            spec=specs[row[0]],
            placements=(),
        )
        for row in rows
    )


def snapshot_load(
    *, backend: ClusterView, teams_blocked: tuple[tuple[str, str], ...] = (), now: datetime | None = None
) -> m.Snapshot:
    """Read queues and live jobs from the database and nodes from the cluster backend.

    A pending job still in its back-off after a failed start (``not_before`` after ``now``) is left
    out: the engine does not consider it until the back-off is over."""
    in_backoff = Q(state=JobState.PENDING, not_before__gt=now or django_now())
    live = Job.objects.filter(state__in=[JobState.PENDING, *ACTIVE_STATES]).exclude(in_backoff)
    # Plain rows, not model instances (a cycle reads thousands of jobs every few seconds), and only
    # the columns the engine reads: a tenant's long command and labels never slow a cycle down. The
    # spec's lists (tolerations, node selector, placement rules) are read once per job (``jobs_spec_parts``).
    rows = list(live.order_by("id").values_list(*WORKLOAD_COLUMNS))
    # The related rows by a join on the same filter, not an IN list of every id (which costs more to
    # send and plan than to run).
    allowed = allowed_models_of(live)
    placements: dict[int, list[m.ReplicaPlacement]] = defaultdict(list)
    placement_rows = (
        ReplicaPlacement.objects.filter(job__state__in=ACTIVE_STATES)
        .order_by("job_id", "replica")
        .values_list("job_id", "node", "gpu_indices", "gpu_milli", "mig_profile", "mig_slot", "cpu_milli", "memory_mib")
    )
    for job_id, *values in placement_rows:
        placements[job_id].append(ReplicaPlacement.engine_placement_of(*values))
    specs = jobs_spec_parts([(row[0], row[-1]) for row in rows])
    cluster_queues, local_queues = queues_load()
    gpu_models = list(GpuModel.objects.all())
    return m.Snapshot(
        nodes=tuple(backend.nodes()),
        cluster_queues=cluster_queues,
        local_queues=local_queues,
        workloads=tuple(
            workload_from_row(
                row,
                allowed_gpu_models=tuple(allowed.get(row[0], ())),
                spec=specs[row[0]],
                placements=tuple(placements.get(row[0], ())),
            )
            for row in rows
        ),
        foreign=tuple(backend.foreign_usage()),
        teams_blocked=teams_blocked,
        mig_profiles=tuple((g.name, tuple(g.mig_profiles or ())) for g in gpu_models),
        gpu_memory_gib=tuple((g.name, g.memory_gib) for g in gpu_models),
        pools=pools_load(),
        toleration_grants=toleration_grants_load(),
    )


def snapshot_view_load(*, backend: ClusterView) -> m.Snapshot:
    """The cluster and its live jobs for the pages that read it (Cluster, Queues), in plain values.

    Queues, nodes, pools and foreign pods as :func:`snapshot_load` has them, and every pending,
    admitted or running job with its queue, resources, replicas, GPU models (admitted on and allowed),
    priority and placements; what only placement reads (placement rules, tolerations, node selectors,
    start windows) is left at its default. Not for the cycle: a read of ~1,000 live jobs in a few
    queries without building model instances (the cycle's snapshot costs about ten times more)."""
    live = [JobState.PENDING, *ACTIVE_STATES]
    allowed: dict[int, list[str]] = defaultdict(list)
    through = Job.allowed_gpu_models.through.objects.filter(job__state__in=live)
    for job_id, name in through.values_list("job_id", "gpumodel__name"):
        allowed[job_id].append(name)
    placements: dict[int, list[m.ReplicaPlacement]] = defaultdict(list)
    rows = ReplicaPlacement.objects.filter(job__state__in=ACTIVE_STATES).order_by("job_id", "replica")
    for job_id, node, devices, milli, mig, slot, cpu, memory in rows.values_list(
        "job_id", "node", "gpu_indices", "gpu_milli", "mig_profile", "mig_slot", "cpu_milli", "memory_mib"
    ):
        placements[job_id].append(m.ReplicaPlacement(node, tuple(devices), milli, mig or None, slot, cpu, memory))
    fields = (
        "id", "local_queue__team__slug", "local_queue__name", "team__slug", "priority_class__value", "created_at",
        "gpu", "gpu_milli", "mig_profile", "gpu_memory_gib", "cpu_milli", "memory_mib", "replicas", "min_available",
        "runtime_s", "state", "gpu_model__name", "ray",
    )  # fmt: skip
    workloads = []
    for row in Job.objects.filter(state__in=live).order_by("id").values_list(*fields):
        (pk, lq_team, lq_name, team, priority, created, gpu, milli, mig, memory_gib, cpu, memory, replicas,
         min_available, runtime_s, state, model, ray) = row  # fmt: skip
        workloads.append(
            m.Workload(
                id=str(pk),
                local_queue=f"{lq_team}/{lq_name}",
                team=team,
                priority=priority,
                created_at=created.timestamp(),
                resources=m.Resources(gpu, milli, mig or None, memory_gib, cpu, memory),
                replicas=replicas,
                min_available=min_available,
                allowed_gpu_models=tuple(sorted(allowed.get(pk, ()))),
                runtime_s=float(runtime_s),
                state=ENGINE_STATE[JobState(state)],
                gpu_model=model,
                placements=tuple(placements.get(pk, ())),
                pod_sets=ray_pod_sets(ray) or (),  # a pending Ray job's workers count too
            )
        )
    cluster_queues, local_queues = queues_load()
    gpu_models = list(GpuModel.objects.values_list("name", "mig_profiles", "memory_gib"))
    return m.Snapshot(
        nodes=tuple(backend.nodes()),
        cluster_queues=cluster_queues,
        local_queues=local_queues,
        workloads=tuple(workloads),
        foreign=tuple(backend.foreign_usage()),
        mig_profiles=tuple((name, tuple(profiles or ())) for name, profiles, _ in gpu_models),
        gpu_memory_gib=tuple((name, gib) for name, _, gib in gpu_models),
        pools=pools_load(),
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
        started = [
            int(a.workload_id)
            for a in plan.admissions
            if admission_apply(a, now=now, nodes=nodes, gpu_models=gpu_models)
        ]
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
    # The placement rows and the attempt's record are written with the transition (same transaction).
    job_transition(
        job=job, to_state=JobState.ADMITTED, at=now, reason=reason, detail=detail, placements=admission.placements
    )
    return True


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
