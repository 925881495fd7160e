"""portal's CPU-bound key for GPU-sharing pods: when the cluster's CPU will run out before its GPUs,
a sharing pod goes, among the placements FGD's score and the tightest device cannot separate, to the
node with the most free GPU.

*CPU-bound*: the expected pods need ``kappa`` milli-CPU per milli-GPU (``kappa = sum_t p_t cpu_t /
sum_t p_t gpu_t`` over FGD's typical pods ``t``, CPU-only ones included, ``gpu_t`` their whole GPU
request), so filling the free GPU milli ``G`` of the GPU nodes takes ``kappa * G`` milli-CPU; the
cluster is CPU-bound while that exceeds the free CPU milli ``C`` of the GPU nodes: ``kappa * G > C``.
Then what is left unallocated is GPU on nodes whose CPU is gone, and the node-order tie-break, which
packs sharing pods onto the first nodes with a fitting device (often the CPU-rich two-GPU T4 nodes of
openb), spends CPU that the CPU-only and whole-GPU pods needed there. docs/simulator.md has the
measurements: of the paper's 17 traces it turns on only on ``cpu250`` (CPU demand at 107 % of the
GPU nodes' CPU, the others 70-96 %), where it takes ``portal`` from 3.7 % fewer unallocated GPUs
than FGD to 20.9 % (seeds 42-51); while the cluster is not CPU-bound it is off and placements are
exactly as without it.
"""

from __future__ import annotations

from collections.abc import Sequence

from .workload import TypicalPod


def cpu_per_gpu_milli(typical: Sequence[TypicalPod]) -> float:
    """``kappa``: expected milli-CPU per milli-GPU of the typical pods (0 without GPU demand)."""
    gpu = sum(t.frequency * t.gpu_milli * t.gpu_count for t in typical)
    if gpu <= 0:
        return 0.0
    return sum(t.frequency * t.cpu_milli for t in typical) / gpu


def cpu_bound(kappa: float, gpu_free_milli: float, cpu_free_milli: float) -> bool:
    """Whether filling the free GPU milli of the GPU nodes (``gpu_free_milli``) with the expected pods
    needs more CPU than those nodes have free (``cpu_free_milli``, summed over them)."""
    return kappa > 0 and kappa * gpu_free_milli > cpu_free_milli


def spread_weight(max_node_gpu_milli: int) -> float:
    """Weight of a node's free GPU milli in the key: the whole range stays below one milli of the
    tightest-device key above it."""
    return 0.9 / max(1, max_node_gpu_milli)
