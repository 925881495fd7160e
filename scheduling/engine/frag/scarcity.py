"""Scarce capabilities: workload shapes that few places are left for, and which placements end them.

``portal`` ranks nodes by it after model pressure and before FGD's score (``scorer``): a pod goes
where it does not take away a node's ability to hold a shape whose expected arrivals, until the
cluster is full, are a large share of the copies of it that still fit. FGD only plans for its
*typical* pods (the commonest shapes covering 95 % of the pods), so a rare shape with a large
request (an 8-GPU pod asking 120 CPUs that only an empty 128-CPU node can hold) is invisible to it,
although it can be a large part of the GPU request; ``portal``'s own secondary keys even prefer
such CPU-rich nodes for small pods.

From the whole workload (every shape ``s`` of the pod list, frequency ``p_s``, request ``r_s =
gpu_milli × gpu_count``; CPU-only shapes count in the frequencies only):

* **copies** ``c_n(s)``: how many copies of ``s`` node ``n`` can still take, bounded by its devices
  (whole devices for whole-GPU shapes, free milli per device for sharing ones), its CPU and the
  shape's GPU models; ``C_s = Σ_n c_n(s)``;
* **need** of ``s``: ``N_s = p_s × r_s / D × free / (C_s × r_s)`` with ``D = Σ_s p_s r_s`` (the mean
  GPU request per pod) and ``free`` the cluster's free GPU milli: the copies of ``s`` expected to
  arrive until the cluster is full (``p_s × free / D``) per copy that still fits;
* **weight**: ``E / (1 + E)`` with ``E = max(0, N_s - SCARCITY_SLACK)``: shapes expected to need less
  than that share of their places weigh nothing;
* **penalty** of a placement on a node: the sum of the weights of the shapes the node can host now
  and cannot host after it (the node's last copy of ``s`` taken away).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .arrays import MILLI, PodShape
from .states import DeviceOf
from .workload import TypicalArrays

SCARCITY_SLACK = 0.1  # measured: 0 / 0.1 / 0.2 / 0.3 / 0.4 / 0.5 on the generated variants (docs/simulator.md)


def copies_of(cpu: np.ndarray, gpu: np.ndarray, model_row: np.ndarray, table: TypicalArrays) -> np.ndarray:
    """``c_n(s)`` (C, S) of candidate node states (``cpu`` (C,), ``gpu`` (C, D) with -1 padding)."""
    free = np.maximum(gpu, 0)
    per_device = (free[:, :, None] // table.umilli[None, None, :]).sum(axis=1)[:, table.uidx]
    copies = np.where(table.shares[None, :], per_device, per_device // table.num[None, :])
    copies = np.minimum(copies, np.maximum(cpu, 0)[:, None] // np.maximum(table.cpu, 1)[None, :])
    if not table.any_access:
        copies = np.where(table.access[model_row], copies, 0)
    return copies


@dataclass(slots=True)
class Scarcity:
    """The copies of every workload shape per node, kept current by node version (``refresh``)."""

    table: TypicalArrays
    copies: np.ndarray  # (N, S) c_n(s) at version[n]
    version: np.ndarray  # (N,) node version the row was computed at
    total: np.ndarray  # (S,) C_s
    expected: np.ndarray  # (S,) p_s / D: copies expected per milli of GPU request

    @classmethod
    def build(cls, table: TypicalArrays, nodes: int) -> Scarcity:
        demand = float((table.freq * table.milli * table.num).sum())
        expected = table.freq / demand if demand > 0 else np.zeros_like(table.freq)
        width = table.milli.size
        return cls(table, np.zeros((nodes, width), np.int64), np.full(nodes, -1, np.int64), np.zeros(width), expected)

    def refresh(self, version: np.ndarray, cpu: np.ndarray, gpu: np.ndarray, model_row: np.ndarray) -> None:
        stale = np.flatnonzero(self.version != version)
        if stale.size == 0:
            return
        rows = copies_of(cpu[stale], gpu[stale], model_row[stale], self.table)
        self.total += (rows - self.copies[stale]).sum(axis=0)
        self.copies[stale] = rows
        self.version[stale] = version[stale]

    def weights(self, free_milli: float) -> np.ndarray:
        """Per shape, ``E / (1 + E)`` (see the module docstring); 0 for shapes with no copy left."""
        need = np.zeros(self.total.size)
        some = self.total > 0
        need[some] = self.expected[some] * free_milli / self.total[some]
        excess = np.maximum(need - SCARCITY_SLACK, 0.0)
        return np.where(some, excess / (1.0 + excess), 0.0)

    def penalty(
        self,
        pod: PodShape,
        idx: np.ndarray,
        device: DeviceOf,
        state: tuple[np.ndarray, np.ndarray, np.ndarray],
        weight: np.ndarray,
    ) -> np.ndarray:
        """Sum of the weights of the shapes nodes ``idx`` host now and not after placing ``pod`` there
        (a sharing pod on ``device[node]``, a whole-GPU pod on the lowest-indexed fully free devices);
        ``state`` is the nodes' (free CPU, free milli per device, model row), all nodes."""
        scarce = np.flatnonzero(weight > 0)
        out = np.zeros(idx.size)
        if scarce.size == 0 or idx.size == 0:
            return out
        now = self.copies[np.ix_(idx, scarce)] > 0
        rows = np.flatnonzero(now.any(axis=1))
        if rows.size == 0:
            return out
        nodes = idx[rows]
        cpu, gpu, model_row = state
        gpu_after = gpu[nodes].copy()
        if pod.is_sharing:
            gpu_after[np.arange(nodes.size), device[nodes]] -= pod.gpu_milli
        elif pod.gpu_count > 0:
            whole = gpu_after >= MILLI
            gpu_after -= (whole & (np.cumsum(whole, axis=1) <= pod.gpu_count)) * pod.gpu_milli
        after_n = copies_of(cpu[nodes] - pod.cpu_milli, gpu_after, model_row[nodes], _subset(self.table, scarce))
        out[rows] = (now[rows] & (after_n == 0)) @ weight[scarce]
        return out


def _subset(table: TypicalArrays, cols: np.ndarray) -> TypicalArrays:
    """``table`` restricted to the shapes ``cols``."""
    milli = table.milli[cols]
    distinct = np.unique(milli)
    return TypicalArrays(
        cpu=table.cpu[cols],
        milli=milli,
        num=table.num[cols],
        freq=table.freq[cols],
        access=table.access[:, cols],
        cpu_only_freq=0.0,
        any_access=bool(table.access[:, cols].all()),
        umilli=distinct,
        uidx=np.searchsorted(distinct, milli),
    )
