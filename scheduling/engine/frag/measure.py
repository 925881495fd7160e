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

from collections.abc import Sequence

import numpy as np

from .arrays import NodeArrays
from .workload import TypicalArrays, TypicalPod


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
    return out + per_type @ tp.freq


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
    frag = out + np.where(satisfied, small, total[:, None]) @ tp.freq
    stranded = out + (total[:, None] - copies * (tp.milli * tp.num)[None, :]) @ tp.freq
    return frag, stranded


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
    return out + per_type @ tp.freq


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
