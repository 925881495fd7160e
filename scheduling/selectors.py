"""Read-side questions about the cluster, for other apps (billing, pages) that must not drive a backend.

``cluster_nodes`` and ``gpu_capacity`` go through the configured backend (the simulated cluster's
rows, or the Kubernetes watch cache); callers pass ``backend`` when they already hold one.
"""

from __future__ import annotations

from collections import defaultdict

from django.conf import settings

from scheduling.adapters.contract import ClusterBackend, node_capacity_type
from scheduling.adapters.factory import cluster_backend
from scheduling.engine.model import GpuNode


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


def runtime_speedup() -> float:
    """How much faster than requested the cluster runs jobs: ``SIM_SPEEDUP`` for the simulated cluster
    (a job of ``runtime_s`` runs ``runtime_s / SIM_SPEEDUP`` wall seconds), 1 for a real one. Expected
    ends and costs are in the cluster's own time scale."""
    if settings.CLUSTER_BACKEND == "simulated":
        return float(settings.SIM_SPEEDUP)
    return 1.0
