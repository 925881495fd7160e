"""The snapshot a cycle plans from, loaded from Django rows (jobs, nodes, queues, pools, toleration
grants, recent submissions). A job as an engine workload is in ``workloads``; writing a plan is in
``apply``.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import datetime

from django.db.models import Model
from django.utils.timezone import now as django_now

from portal.jobs.models import ClusterQueue, FlavorQuota, GpuModel, Job, LocalQueue, ReplicaPlacement
from portal.jobs.states import ACTIVE_STATES, JobState
from portal.tenants.models import Team
from portal.tenants.selectors import team_toleration_allowlist
from portal.tenants.tolerations import as_grant
from scheduling.adapters.contract import (
    ClusterView,
    spot_toleration,
)
from scheduling.adapters.job_rows import KeptJobs
from scheduling.adapters.k8s.ray import pod_sets as ray_pod_sets
from scheduling.adapters.workloads import ENGINE_STATE, local_queue_key
from scheduling.engine import model as m
from scheduling.models import NodePool

logger = logging.getLogger(__name__)


# Every table ``queues_load``, ``pools_load`` and GPU models' memory and MIG profiles read: what a
# cluster configuration holds besides its nodes.
CONFIGURATION_TABLES: tuple[type[Model], ...] = (ClusterQueue, FlavorQuota, LocalQueue, Team, GpuModel, NodePool)


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
    *,
    backend: ClusterView,
    teams_blocked: tuple[tuple[str, str], ...] = (),
    now: datetime | None = None,
    recent_since: datetime | None = None,
    kept: KeptJobs | None = None,
) -> m.Snapshot:
    """Read queues and live jobs from the database and nodes from the cluster backend.

    A pending job still in its back-off after a failed start (``not_before`` after ``now``) is left
    out: the engine does not consider it until the back-off is over. With ``recent_since``, the jobs
    submitted after it, in any state, are the snapshot's ``recent`` (as pending workloads: the
    forecast expects their like again). ``kept``: the jobs of the last read, re-read only where they
    changed (``job_rows``); without it every job is read."""
    read = (kept or KeptJobs()).read(since=recent_since)
    cluster_queues, local_queues = queues_load()
    gpu_models = list(GpuModel.objects.all())
    return m.Snapshot(
        nodes=tuple(backend.nodes()),
        cluster_queues=cluster_queues,
        local_queues=local_queues,
        workloads=read.live(now=now or django_now()),
        foreign=tuple(backend.foreign_usage()),
        teams_blocked=teams_blocked,
        mig_profiles=tuple((g.name, tuple(g.mig_profiles or ())) for g in gpu_models),
        gpu_memory_gib=tuple((g.name, g.memory_gib) for g in gpu_models),
        pools=pools_load(),
        toleration_grants=toleration_grants_load(),
        recent=read.recent(since=recent_since) if recent_since is not None else (),
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
