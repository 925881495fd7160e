"""Read-side questions about the cluster, for other apps (billing, pages, the submit service) that must
not drive a backend.

``cluster_nodes``, ``gpu_capacity``, ``cluster_configuration`` and ``job_never_fits`` go through the
configured backend (the simulated cluster's rows, or the Kubernetes watch cache); callers pass
``backend`` when they already hold one.
"""

from __future__ import annotations

import logging
from collections import defaultdict

from django.conf import settings

from portal.jobs.models import GpuModel, Job
from scheduling.adapters.contract import ClusterBackend, node_capacity_type
from scheduling.adapters.factory import cluster_backend
from scheduling.adapters.orm import queues_load, workload_from_job
from scheduling.engine.model import GpuNode, Reason, Snapshot
from scheduling.engine.verdict import never_fits

logger = logging.getLogger(__name__)


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
    return never_fits(cluster_configuration(nodes=nodes), workload_from_job(job, []))


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
