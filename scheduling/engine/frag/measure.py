"""Fragmentation measures of candidate node states, vectorised over nodes (the FGD paper's model).

For typical pods ``t`` with frequency ``p_t`` (``workload.TypicalArrays``), in milli-GPU:

* **FGD's fragmentation** of a node (``FragAmountSumExceptQ3`` in the reference simulator):
  ``sum_t p_t * F(node, t)``, where ``F`` is the node's free GPU milli if ``t`` cannot run there (CPU
  short, GPU model not allowed, too few devices with enough free milli, or ``t`` is CPU-only), else
  the free milli on devices too small for ``t``.
* **Stranded GPU** (``portal``'s secondary measure): where FGD asks "can one more ``t`` fit?", count
  how many copies of ``t`` the node can still take, bounded by devices and CPU together, and call
  everything else stranded. A node whose CPU runs out before its GPUs shows its stranded GPUs before
  it is full.

States are given as arrays: ``cpu`` (C,) free milli-CPU, ``gpu`` (C, D) free milli per device with -1
padding, ``model_row`` (C,) the node's row in ``TypicalArrays.access``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .arrays import NodeArrays
from .workload import TypicalArrays, TypicalPod


def _expected(per_type: np.ndarray, tp: TypicalArrays) -> np.ndarray:
    """Each row of ``per_type`` (C, T) weighted by the typical pods' frequencies, summed in typical-pod
    order (``((x0 f0 + x1 f1) + x2 f2) + ...``): a row's value does not depend on the other rows of the
    batch (BLAS's matrix-vector product sums a row differently with the number of rows), and
    :func:`node_frag_and_stranded` computes the same float for one node without arrays."""
    acc = per_type[:, 0] * tp.freq[0]
    for t in range(1, per_type.shape[1]):
        acc = acc + per_type[:, t] * tp.freq[t]
    return acc


def _idle(gpu: np.ndarray, tp: TypicalArrays) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(free milli per device, free milli per node, what CPU-only typical pods count of it: all)."""
    free = np.maximum(gpu, 0)
    total = free.sum(axis=1).astype(np.float64)
    return free, total, total * tp.cpu_only_freq


def frag_milli(cpu: np.ndarray, gpu: np.ndarray, model_row: np.ndarray, tp: TypicalArrays) -> np.ndarray:
    """FGD's expected fragmented GPU milli of each candidate node state."""
    free, total, out = _idle(gpu, tp)
    if tp.milli.size == 0:
        return out
    # Device work is shared by typical pods with the same gpu_milli (U distinct values, U << T).
    fits = gpu[:, :, None] >= tp.umilli[None, None, :]  # (C, D, U)
    count = fits.sum(axis=1)[:, tp.uidx]  # (C, T)
    small = (total[:, None] - np.einsum("cd,cdu->cu", free.astype(np.float64), fits))[:, tp.uidx]
    satisfied = (count >= tp.num[None, :]) & (cpu[:, None] >= tp.cpu[None, :])
    if not tp.any_access:
        satisfied &= tp.access[model_row]
    per_type = np.where(satisfied, small, total[:, None])  # too-small devices only, or everything
    return out + _expected(per_type, tp)


def frag_and_stranded(
    cpu: np.ndarray, gpu: np.ndarray, model_row: np.ndarray, tp: TypicalArrays
) -> tuple[np.ndarray, np.ndarray]:
    """``(frag_milli, stranded_milli)`` of the same candidates in one pass (shared device work)."""
    free, total, out = _idle(gpu, tp)
    if tp.milli.size == 0:
        return out, out.copy()
    per_device = free[:, :, None] // tp.umilli[None, None, :]  # (C, D, U) copies per device
    fits = per_device > 0  # gpu_milli <= 1000, so one copy fits iff the device has the milli
    count = fits.sum(axis=1)[:, tp.uidx]  # (C, T)
    small = (total[:, None] - np.einsum("cd,cdu->cu", free.astype(np.float64), fits))[:, tp.uidx]
    cpu_ok = cpu[:, None] >= tp.cpu[None, :]
    satisfied = (count >= tp.num[None, :]) & cpu_ok
    copies = per_device.sum(axis=1)[:, tp.uidx]
    copies = np.where(tp.shares[None, :], copies, copies // tp.num[None, :])
    copies = np.minimum(copies, np.maximum(cpu, 0)[:, None] // np.maximum(tp.cpu, 1)[None, :])
    if not tp.any_access:
        access = tp.access[model_row]
        satisfied &= access
        copies = np.where(access, copies, 0)
    frag = out + _expected(np.where(satisfied, small, total[:, None]), tp)
    stranded = out + _expected(total[:, None] - copies * (tp.milli * tp.num)[None, :], tp)
    return frag, stranded


@dataclass(frozen=True, slots=True)
class TypicalRows:
    """The typical pods of a ``TypicalArrays`` as plain numbers, for :func:`node_frag_and_stranded`."""

    cpu: tuple[int, ...]
    milli: tuple[int, ...]
    num: tuple[int, ...]
    freq: tuple[float, ...]
    shares: tuple[bool, ...]
    usable: tuple[int, ...]  # milli * num: what one copy of the typical pod takes
    access: tuple[tuple[bool, ...], ...]  # per model row
    cpu_only_freq: float
    any_access: bool
    umilli: tuple[int, ...]
    uidx: tuple[int, ...]

    @classmethod
    def of(cls, tp: TypicalArrays) -> TypicalRows:
        return cls(
            cpu=tuple(tp.cpu.tolist()),
            milli=tuple(tp.milli.tolist()),
            num=tuple(tp.num.tolist()),
            freq=tuple(tp.freq.tolist()),
            shares=tuple(tp.shares.tolist()),
            usable=tuple((tp.milli * tp.num).tolist()),
            access=tuple(tuple(row) for row in tp.access.tolist()),
            cpu_only_freq=tp.cpu_only_freq,
            any_access=tp.any_access,
            umilli=tuple(tp.umilli.tolist()),
            uidx=tuple(tp.uidx.tolist()),
        )


def node_frag_and_stranded(cpu: int, gpu: Sequence[int], model_row: int, tr: TypicalRows) -> tuple[float, float]:
    """:func:`frag_and_stranded` of one node state without arrays: the same floats (the same operations
    in the same order; every sum before the weighting is a sum of whole numbers, exact in any order).
    Cheaper than the array pass for a node or two, where numpy's per-call cost dominates."""
    free = [v if v > 0 else 0 for v in gpu]
    total = float(sum(free))
    out = total * tr.cpu_only_freq
    if not tr.milli:
        return out, out
    counts, smalls, copies_u = [], [], []
    for m in tr.umilli:
        per_device = [f // m for f in free]
        counts.append(sum(1 for p in per_device if p > 0))
        smalls.append(total - float(sum(f for f, p in zip(free, per_device, strict=True) if p > 0)))
        copies_u.append(sum(per_device))
    cpu_room = cpu if cpu > 0 else 0
    access = tr.access[model_row]
    frag = stranded = 0.0
    for t, u in enumerate(tr.uidx):
        need = tr.cpu[t]
        satisfied = counts[u] >= tr.num[t] and cpu >= need
        copies = copies_u[u] if tr.shares[t] else copies_u[u] // tr.num[t]
        copies = min(copies, cpu_room // (need if need > 1 else 1))
        if not tr.any_access and not access[t]:
            satisfied, copies = False, 0
        f = tr.freq[t]
        x_frag = (smalls[u] if satisfied else total) * f
        x_stranded = (total - copies * tr.usable[t]) * f
        if t == 0:
            frag, stranded = x_frag, x_stranded
        else:
            frag += x_frag
            stranded += x_stranded
    return out + frag, out + stranded


class NodeMeasures:
    """:func:`node_frag_and_stranded` against the typical pods ``rows``, memoised per node state (the
    function of the state alone: a recalled pair is the pair computed). A placement's state is measured
    when the placement is scored and again when its node is scored next; about half of a cycle's
    one-node measures were such repeats. Holds at most ``MEMO_LIMIT`` states (then starts over)."""

    __slots__ = ("_memo", "rows")

    def __init__(self, rows: TypicalRows) -> None:
        self.rows = rows
        self._memo: dict[tuple[int, ...], tuple[float, float]] = {}

    def __call__(self, cpu: int, gpu: Sequence[int], model_row: int) -> tuple[float, float]:
        """``(frag, stranded)`` of the state (free CPU milli, free milli per device, model row)."""
        key = (model_row, cpu, *gpu)
        found = self._memo.get(key)
        if found is None:
            if len(self._memo) >= MEMO_LIMIT:
                self._memo.clear()
            found = self._memo[key] = node_frag_and_stranded(cpu, gpu, model_row, self.rows)
        return found


MEMO_LIMIT = 100_000


def node_sigmoid_score(delta: float) -> float:
    """:func:`sigmoid_score` of one number (numpy's exp, as the array form: ``math.exp`` may differ in
    the last bit)."""
    return float(math.floor(100.0 / (1.0 + float(np.exp(-delta / 1000.0)))))


def stranded_milli(cpu: np.ndarray, gpu: np.ndarray, model_row: np.ndarray, tp: TypicalArrays) -> np.ndarray:
    """Expected GPU milli each candidate node state could *not* fill with copies of a typical pod."""
    free, total, out = _idle(gpu, tp)
    if tp.milli.size == 0:
        return out
    per_device = (free[:, :, None] // tp.umilli[None, None, :]).sum(axis=1)[:, tp.uidx]  # (C, T) copies
    copies = np.where(tp.shares[None, :], per_device, per_device // tp.num[None, :])
    copies = np.minimum(copies, np.maximum(cpu, 0)[:, None] // np.maximum(tp.cpu, 1)[None, :])
    if not tp.any_access:
        copies = np.where(tp.access[model_row], copies, 0)
    usable = copies * (tp.milli * tp.num)[None, :]
    per_type = total[:, None] - usable
    return out + _expected(per_type, tp)


def sigmoid_score(delta: np.ndarray) -> np.ndarray:
    """FGD's node score from a fragmentation decrease: ``int(100 * sigmoid(delta / 1000))``."""
    # Go: int64(sigmoid(delta / 1000) * MaxNodeScore), truncation toward zero (values are positive).
    return np.floor(100.0 / (1.0 + np.exp(-delta / 1000.0)))


def fragmentation_milli(
    nodes: NodeArrays, gpu_free_milli: np.ndarray, cpu_free_milli: np.ndarray, typical: Sequence[TypicalPod]
) -> float:
    """Cluster fragmentation (milli-GPU) of a given free-capacity state, w.r.t. ``typical``."""
    tp = TypicalArrays.build(typical, nodes.models)
    rows = np.where(nodes.model_ids >= 0, nodes.model_ids, len(nodes.models))
    return float(frag_milli(cpu_free_milli, gpu_free_milli, rows, tp).sum())
