"""The FGD paper's baseline policies as node scores (integer 0..100 like the Go plugins, higher wins).

* ``dotprod`` (Tetris): dot product of the request and the node's free CPU and GPU (one merged GPU
  dimension), both normalised by the largest node spec (128 CPUs, 8 GPUs); the least aligned wins.
* ``bestfit``: the least normalised CPU and GPU left over.
* ``clustering``: nodes already running pods of the same GPU count (sharing pods are one kind).
* ``packing``: GPU packing: shared devices first, then partly used nodes, then empty ones.

``random`` has no scores (``NodeScorer.score_nodes`` gives zeros); ``fgd`` and ``portal`` are in
``scorer``.
"""

from __future__ import annotations

import numpy as np

from .arrays import MILLI, PodShape

MAX_SPEC_CPU_MILLI = 128_000  # the reference simulator's normalisers (largest node spec)
MAX_SPEC_GPU_MILLI = 8_000
MAX_NODE_SCORE = 100
AFFINITY_TAGS = 9  # clustering tags: 0 = sharing pod, k = pod of k whole GPUs (k <= 8)


def affinity_tag(pod: PodShape) -> int:
    """The ``clustering`` kind of a GPU pod."""
    return 0 if pod.is_sharing else min(pod.gpu_count, AFFINITY_TAGS - 1)


def dotprod(pod: PodShape, cpu_free: np.ndarray, gpu_free_total: np.ndarray) -> np.ndarray:
    dot = (cpu_free / MAX_SPEC_CPU_MILLI) * (pod.cpu_milli / MAX_SPEC_CPU_MILLI) + (
        gpu_free_total / MAX_SPEC_GPU_MILLI
    ) * (pod.total_gpu_milli / MAX_SPEC_GPU_MILLI)
    return np.floor(MAX_NODE_SCORE * (1.0 - dot / 2.0))


def bestfit(pod: PodShape, cpu_free: np.ndarray, gpu_free_total: np.ndarray) -> np.ndarray:
    cpu_left = 0.5 * (cpu_free - pod.cpu_milli) / MAX_SPEC_CPU_MILLI
    left = cpu_left + 0.5 * (gpu_free_total - pod.total_gpu_milli) / MAX_SPEC_GPU_MILLI
    return np.floor((1.0 - left) * MAX_NODE_SCORE)


def clustering(pod: PodShape, gpu_free_total: np.ndarray, affinity: np.ndarray) -> np.ndarray:
    """``affinity`` (C, ``AFFINITY_TAGS``): pods of each tag on each candidate node."""
    if pod.gpu_count == 0:
        return np.zeros(len(gpu_free_total))
    kinds = (affinity > 0).sum(axis=1)
    has = affinity[:, affinity_tag(pod)] > 0
    base = (MAX_NODE_SCORE // 4) * (MAX_SPEC_GPU_MILLI - gpu_free_total) // MAX_SPEC_GPU_MILLI
    offset = np.where(has, np.where(kinds == 1, 75, 50), np.where(kinds == 0, 25, 0))
    return (base + offset).astype(np.float64)


def packing(pod: PodShape, gpu: np.ndarray, gpu_count: np.ndarray) -> np.ndarray:
    """``gpu`` (C, D): free milli per device of each candidate node (-1 pads absent devices)."""
    if pod.gpu_milli <= 0:
        return np.zeros(len(gpu))
    fully_free = (gpu == MILLI).sum(axis=1)
    # Devices the pod would use: fitting devices, least free first (stable), gpu_count of them.
    order = np.argsort(np.where(gpu < 0, MILLI + 1, gpu), axis=1, kind="stable")
    sorted_free = np.take_along_axis(gpu, order, axis=1)
    fit = sorted_free >= pod.gpu_milli
    use = fit & (np.cumsum(fit, axis=1) <= pod.gpu_count)
    whole_used = (use & (sorted_free == MILLI)).sum(axis=1)
    ratio = ((np.maximum(sorted_free, 0) * 100) // MILLI * use).sum(axis=1)
    shared = np.maximum(MAX_NODE_SCORE - ratio // 10, MAX_NODE_SCORE // 2)
    partly = np.maximum(MAX_NODE_SCORE // 2 - whole_used, MAX_NODE_SCORE // 3)
    empty = np.maximum(MAX_NODE_SCORE // 3 - fully_free, fully_free)
    score = np.where(fully_free == gpu_count, empty, np.where(whole_used > 0, partly, shared))
    return score.astype(np.float64)
