"""What placing a pod does to candidate nodes, as ``NodeScorer`` scores it (``scorer``): per node the
score, the device (GPU-sharing pods), the policy's measure after and FGD's measure after.

``fgd`` scores the decrease of FGD's fragmentation (``measure.frag_milli``) as FGD's integer score;
``portal`` scores FGD's integer score first (weighted by ``LEX``) and below it a secondary key: the
tightest device for a sharing pod, the least free GPU then CPU for a CPU-only pod, the decrease of
stranded GPU (``measure.stranded_milli``) for other pods. The array functions score many nodes at once;
``node_delta`` scores one node with plain numbers, to the same floats.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .arrays import MILLI, PodShape
from .measure import (
    NodeMeasures,
    frag_and_stranded,
    frag_milli,
    node_sigmoid_score,
    sigmoid_score,
)
from .workload import TypicalArrays

LEX = 1e10  # weight of FGD's integer score in portal's lexicographic key (secondary keys stay below)

Delta = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # score, device, measure after, FGD's after


class NodesState(NamedTuple):
    """The candidate nodes as the pod would leave their CPU, with their devices as they are now."""

    cpu: np.ndarray  # (K,) free CPU milli after the pod
    gpu: np.ndarray  # (K, D) free milli per device now
    rows: np.ndarray  # (K,) model row
    metric: np.ndarray  # (K,) FGD's fragmentation of each node now
    free_total: np.ndarray  # (K,) free GPU milli summed over devices now


def after(
    policy: str, table: TypicalArrays, cpu: np.ndarray, gpu: np.ndarray, rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray | None]:
    """The policy's measure of candidate states, and FGD's (portal's primary key) for portal."""
    if policy == "portal":
        frag_after, stranded_after = frag_and_stranded(cpu, gpu, rows, table)
        return stranded_after, frag_after
    return frag_milli(cpu, gpu, rows, table), None


def sharing_delta(pod: PodShape, policy: str, table: TypicalArrays, before: np.ndarray, nodes: NodesState) -> Delta:
    """A sharing pod tries every fitting device of each node; the node takes its first best one."""
    gpu = nodes.gpu
    k, d = gpu.shape
    ni, di = np.nonzero(gpu >= pod.gpu_milli)  # one candidate state per (node, fitting device)
    cand = gpu[ni]
    cand[np.arange(ni.size), di] -= pod.gpu_milli
    measure_after, primary_after = after(policy, table, nodes.cpu[ni], cand, nodes.rows[ni])
    if primary_after is not None:  # portal: FGD's score first, then the tightest device
        score = -(gpu[ni, di] - pod.gpu_milli).astype(np.float64)
        score = score + LEX * sigmoid_score(nodes.metric[ni] - primary_after)
    else:
        score = sigmoid_score(before[ni] - measure_after)
    delta = np.full((k, d), -np.inf)
    delta[ni, di] = score
    after_kd = np.zeros((k, d))
    after_kd[ni, di] = measure_after
    primary_kd = np.full((k, d), np.nan)
    if primary_after is not None:
        primary_kd[ni, di] = primary_after
    device = np.argmax(delta, axis=1)  # first best device
    rows = np.arange(k)
    return delta[rows, device], device, after_kd[rows, device], primary_kd[rows, device]


def devices_delta(pod: PodShape, policy: str, table: TypicalArrays, before: np.ndarray, nodes: NodesState) -> Delta:
    """Whole-GPU pods take the lowest-indexed fully free devices; CPU-only pods take none."""
    k = len(nodes.cpu)
    gpu = nodes.gpu
    if pod.gpu_count > 0:
        whole = gpu >= MILLI
        take = whole & (np.cumsum(whole, axis=1) <= pod.gpu_count)
        gpu = gpu - take * pod.gpu_milli
    measure_after, primary_after = after(policy, table, nodes.cpu, gpu, nodes.rows)
    if primary_after is None:  # fgd
        return sigmoid_score(before - measure_after), np.zeros(k, dtype=np.int64), measure_after, np.full(k, np.nan)
    if pod.gpu_count == 0:
        # CPU-only: the least free GPU, then the least free CPU (0.05 * cpu < 1e4: CPU only breaks ties).
        delta = -1e4 * nodes.free_total - 0.05 * nodes.cpu
    else:
        delta = before - measure_after
    delta = delta + LEX * sigmoid_score(nodes.metric - primary_after)
    return delta, np.zeros(k, dtype=np.int64), measure_after, primary_after


def node_delta(
    pod: PodShape, before: float, metric: float, node: tuple[int, list[int], int, int], measure: NodeMeasures
) -> list[float]:
    """portal's delta row of one node, without arrays: the same floats as the array functions
    (``measure.node_frag_and_stranded``, through ``measure``'s memo). ``before``: its stranded GPU now;
    ``metric``: its FGD fragmentation now; ``node``: (free CPU milli, free milli per device, model row,
    free GPU milli)."""
    cpu_now, gpu, row, free_total = node
    cpu = cpu_now - pod.cpu_milli
    if pod.is_sharing:
        # Every fitting device, the first best one; devices with the same free share leave the same
        # node state (up to device order, which the measures do not see): measured once.
        best, device, best_after, best_primary = -np.inf, 0, 0.0, np.nan
        measured: dict[int, tuple[float, float]] = {}
        for d, free in enumerate(gpu):
            if free < pod.gpu_milli:
                continue
            pair = measured.get(free)
            if pair is None:
                cand = gpu.copy()
                cand[d] = free - pod.gpu_milli
                pair = measured[free] = measure(cpu, cand, row)
            primary_after, measure_after = pair
            score = -float(free - pod.gpu_milli) + LEX * node_sigmoid_score(metric - primary_after)
            if score > best:
                best, device, best_after, best_primary = score, d, measure_after, primary_after
        return [best, float(device), best_after, best_primary]
    if pod.gpu_count > 0:
        left = pod.gpu_count
        for d, free in enumerate(gpu):
            if left and free >= MILLI:
                gpu[d] = free - pod.gpu_milli
                left -= 1
    primary_after, measure_after = measure(cpu, gpu, row)
    if pod.gpu_count == 0:
        delta = -1e4 * free_total - 0.05 * cpu
    else:
        delta = before - measure_after
    delta = delta + LEX * node_sigmoid_score(metric - primary_after)
    return [delta, 0.0, measure_after, primary_after]
