"""Read-side questions about the cluster, for other apps (billing, pages, the submit service) that must
not drive a backend.

``cluster_nodes``, ``gpu_capacity``, ``cluster_configuration``, ``job_never_fits`` and the node
pools go through the configured backend (the simulated cluster's rows, or the Kubernetes watch
cache); callers pass ``backend`` when they already hold one.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from django.conf import settings

from portal.jobs.models import GpuModel, Job
from portal.jobs.states import JobState
from portal.tenants.selectors import team_list_for_user
from scheduling.adapters import orm
from scheduling.adapters.contract import ClusterBackend, node_capacity_type
from scheduling.adapters.factory import cluster_backend
from scheduling.adapters.k8s.training import procs_per_node, rendezvous_env
from scheduling.adapters.orm import queues_load, workload_from_job
from scheduling.engine.filters import topology_levels
from scheduling.engine.model import GpuNode, Policy, Reason, Snapshot
from scheduling.engine.pools import pool_index, share_capacity_milli
from scheduling.engine.verdict import never_fits

logger = logging.getLogger(__name__)


def policy_from_settings() -> Policy:
    """The cycle's policy, from the settings (placement, seed, topology labels)."""
    return Policy(
        placement=settings.PLACEMENT_POLICY,
        seed=settings.SCHEDULER_SEED,
        rack_label=settings.K8S_RACK_LABEL,
        zone_label=settings.K8S_ZONE_LABEL,
        nvlink_label=settings.K8S_NVLINK_LABEL,
    )


def topology_level_labels() -> dict[str, str]:
    """``node``, ``rack``, ``zone``, ``nvlink`` -> the node label each stands for here."""
    return topology_levels(policy_from_settings())


def cluster_nodes(*, backend: ClusterBackend | None = None) -> list[GpuNode]:
    """Every node the cluster reports, cordoned ones included."""
    return (backend or cluster_backend()).nodes()


def gpu_capacity(*, backend: ClusterBackend | None = None) -> dict[tuple[str, str], tuple[int, int]]:
    """``(gpu model, capacity type) -> (GPUs, nodes)`` over every GPU node, cordoned ones included
    (they are paid for, so their GPUs count as idle capacity)."""
    counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for node in cluster_nodes(backend=backend):
        if not node.gpu_model or node.gpu_count <= 0:
            continue
        entry = counts[(node.gpu_model, node_capacity_type(node))]
        entry[0] += node.gpu_count
        entry[1] += 1
    return {key: (gpus, nodes) for key, (gpus, nodes) in counts.items()}


@dataclass(frozen=True, slots=True)
class PoolRow:
    """A node pool as the pages show it (``name`` "" for the nodes in no pool)."""

    name: str
    node_selector: str  # "gpu.type=a10g, ..." ("" for the nodes in no pool)
    placement: str  # the policy in effect there
    overcommit_ratio: float
    fraction_capacity_milli: int  # what fractions may share per device
    nodes: int
    gpus: int
    description: str = ""


def node_pool_list(*, backend: ClusterBackend | None = None) -> list[PoolRow]:
    """The node pools in matching order, each with the nodes and GPUs in it now, then the nodes in
    no pool (when there are any)."""
    pools = orm.pools_load()
    descriptions = orm.pool_descriptions()
    default = settings.PLACEMENT_POLICY
    members: dict[int, list[GpuNode]] = defaultdict(list)
    for node in cluster_nodes(backend=backend):
        members[pool_index(dict(node.labels), pools)].append(node)
    rows = [
        PoolRow(
            name=pool.name,
            node_selector=", ".join(f"{k}={v}" for k, v in pool.node_selector),
            placement=pool.placement or default,
            overcommit_ratio=pool.overcommit_ratio,
            fraction_capacity_milli=share_capacity_milli(pool.overcommit_ratio),
            nodes=len(members[i]),
            gpus=sum(n.gpu_count for n in members[i]),
            description=descriptions.get(pool.name, ""),
        )
        for i, pool in enumerate(pools)
    ]
    if members[-1] and pools:
        rest = members[-1]
        rows.append(PoolRow("", "", default, 1.0, 1000, len(rest), sum(n.gpu_count for n in rest)))
    return rows


def node_pools_of(node_names: Iterable[str], *, backend: ClusterBackend | None = None) -> dict[str, str]:
    """The pool each of ``node_names`` is in ("" for none; nodes the cluster no longer has are left out)."""
    wanted = set(node_names)
    if not wanted:
        return {}
    pools = orm.pools_load()
    out = {}
    for node in cluster_nodes(backend=backend):
        if node.name in wanted:
            index = pool_index(dict(node.labels), pools)
            out[node.name] = pools[index].name if index >= 0 else ""
    return out


def cluster_configuration(*, backend: ClusterBackend | None = None, nodes: list[GpuNode] | None = None) -> Snapshot:
    """The cluster as configured, without workloads: its nodes, every queue and quota, and the GPU
    models' memory and MIG profiles (what ``verdict.never_fits`` reads)."""
    cluster_queues, local_queues = queues_load()
    gpu_models = list(GpuModel.objects.all())
    return Snapshot(
        nodes=tuple(cluster_nodes(backend=backend) if nodes is None else nodes),
        cluster_queues=cluster_queues,
        local_queues=local_queues,
        workloads=(),
        mig_profiles=tuple((g.name, tuple(g.mig_profiles or ())) for g in gpu_models),
        gpu_memory_gib=tuple((g.name, g.memory_gib) for g in gpu_models),
        pools=orm.pools_load(),
    )


def job_never_fits(*, job: Job, backend: ClusterBackend | None = None) -> Reason | None:
    """Why ``job`` (saved, its allowed GPU models set) can never run on the cluster as configured, or
    ``None`` when waiting can let it start: the engine's own test (``scheduling.engine.verdict``).

    ``None`` too when the cluster cannot tell: its API does not answer, or it reports no node at all
    (a cluster being set up, or scaled to zero); the cycle then explains the job as it waits.
    """
    try:
        nodes = cluster_nodes(backend=backend)
    except _unreadable() as exc:
        logger.warning("cluster unreadable, job %s queued unchecked: %s", job.pk, exc)
        return None
    if not nodes:
        return None
    return never_fits(cluster_configuration(nodes=nodes), workload_from_job(job, []), topology_level_labels())


def _unreadable() -> tuple[type[BaseException], ...]:
    """What reading the cluster raises when its API is down (resolved at run time: importing this
    module never imports ``kubernetes``)."""
    if settings.CLUSTER_BACKEND == "kubernetes":
        from scheduling.adapters.kubernetes_api import ClusterApiError

        return (ClusterApiError,)
    return ()


def runtime_speedup() -> float:
    """How much faster than requested the cluster runs jobs: ``SIM_SPEEDUP`` for the simulated cluster
    (a job of ``runtime_s`` runs ``runtime_s / SIM_SPEEDUP`` wall seconds), 1 for a real one. Expected
    ends and costs are in the cluster's own time scale."""
    if settings.CLUSTER_BACKEND == "simulated":
        return float(settings.SIM_SPEEDUP)
    return 1.0


@dataclass(frozen=True, slots=True)
class CapacityWanted:
    """Nodes of one pool and GPU model that jobs waiting for capacity asked for (the last cycle's
    ``engine.provisioning`` requests, from their pending reasons). ``nodes`` sums each job's own
    request (an upper bound: jobs that could share a node are counted apart); ``largest`` is the
    biggest single request, the nodes the largest waiting job needs to start at all."""

    pool: str
    gpu_model: str
    jobs: int
    nodes: int
    largest: int


def capacity_wanted(*, user=None) -> list[CapacityWanted]:
    """The capacity signal by pool and GPU model, over pending jobs: all of them (``user`` None: the
    /metrics scrape, platform admins), else those of the teams ``user`` may see."""
    rows = Job.objects.filter(state=JobState.PENDING, pending_reason__details__has_key="provision_nodes")
    if user is not None and not user.is_staff:
        rows = rows.filter(team__in=team_list_for_user(user=user))
    totals: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for reason in rows.values_list("pending_reason", flat=True):
        details = (reason or {}).get("details") or {}
        try:
            nodes = int(details["provision_nodes"])
        except (KeyError, TypeError, ValueError):
            continue
        entry = totals[(str(details.get("provision_pool") or ""), str(details.get("provision_gpu_model") or ""))]
        entry[0] += 1
        entry[1] += nodes
        entry[2] = max(entry[2], nodes)
    return [CapacityWanted(pool, model, *entry) for (pool, model), entry in sorted(totals.items())]


MAX_WORKERS_SHOWN = 8


def training_environment(*, job: Job) -> list[dict[str, str]]:
    """The rendezvous variables each worker of a training job gets (the pods' own, the same on the
    simulated cluster, which has no pods): one mapping per worker, the first ``MAX_WORKERS_SHOWN``."""
    if job.kind != Job.Kind.TRAINING:
        return []
    return [
        {
            e["name"]: e["value"]
            for e in rendezvous_env(
                job_id=job.pk,
                namespace=job.team.namespace,
                replica=worker,
                replicas=job.replicas,
                procs=procs_per_node(gpu=job.gpu),
            )
        }
        for worker in range(min(job.replicas, MAX_WORKERS_SHOWN))
    ]
