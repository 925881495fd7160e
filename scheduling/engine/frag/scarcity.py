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

How it stays cheap (a score per pod, thousands of nodes): copies and what a placement ends depend
only on a node's state (``states.StateIndex``: GPU model row, free CPU, free milli per device) and
the pod's shape, so both are computed once per distinct state (and shape) and kept as bit sets (bit
``s`` of word ``s // 64``). A score then reads, per candidate node, whether its state holds any
scarce shape (one gather and an ``and``); only those nodes' penalties are summed. ``C_s`` follows
the nodes whose state id moved since the last score.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .arrays import MILLI, PodShape
from .states import DeviceOf
from .workload import TypicalArrays

SCARCITY_SLACK = 0.1  # measured: 0 / 0.1 / 0.2 / 0.3 / 0.4 / 0.5 on the generated variants (docs/simulator.md)
_WORD = 64  # shapes per bit-set word
_FEW = 4  # up to this many moved nodes are recounted one by one

State = tuple[np.ndarray, np.ndarray, np.ndarray]  # all nodes' free CPU (N,), free milli (N, D), model row (N,)


def copies_of(cpu: np.ndarray, gpu: np.ndarray, model_row: np.ndarray, table: TypicalArrays) -> np.ndarray:
    """``c_n(s)`` (C, S) of candidate node states (``cpu`` (C,), ``gpu`` (C, D) with -1 padding)."""
    free = np.maximum(gpu, 0)
    per_device = (free[:, :, None] // table.umilli[None, None, :]).sum(axis=1)[:, table.uidx]
    copies = np.where(table.shares[None, :], per_device, per_device // table.num[None, :])
    copies = np.minimum(copies, np.maximum(cpu, 0)[:, None] // np.maximum(table.cpu, 1)[None, :])
    if not table.any_access:
        copies = np.where(table.access[model_row], copies, 0)
    return copies


def _grown(array: np.ndarray, size: int, fill: int = 0) -> np.ndarray:
    """``array`` with room for ``size`` rows (doubling), new rows ``fill``."""
    if len(array) >= size:
        return array
    out = np.full((max(size, 2 * len(array), 256), *array.shape[1:]), fill, dtype=array.dtype)
    out[: len(array)] = array
    return out


@dataclass(slots=True)
class _Ends:
    """One pod shape's shapes ended by a placement, per node state: ``lost[slot[id]]`` (1 = the
    state holds the shape now and not after); ``slot[id]`` -1 where not computed yet. Only states
    that hold a scarce shape are ever computed, so ``lost`` stays small."""

    slot: np.ndarray  # (K,) int64
    lost: np.ndarray  # (R, S) uint8


@dataclass(slots=True)
class Scarcity:
    """The copies of every workload shape per node state, ``C_s`` over the nodes as they are, and the
    shapes each pod shape's placement ends per state (see the module docstring)."""

    table: TypicalArrays
    expected: np.ndarray  # (S,) p_s / D: copies expected per milli of GPU request
    words: int  # W: bit-set words per state
    total: np.ndarray  # (S,) C_s over the nodes' counted states
    counted: np.ndarray  # (N,) the state id each node is counted at in ``total`` (-1: none)
    floor: np.ndarray  # (S,) C_s, infinite where 0 (a shape no node holds needs nothing)
    epoch: int = -1  # the state index's epoch the ids below belong to
    copies: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.int32))  # (K, S) per state id
    holds: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.uint64))  # (K, W): c > 0
    known: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # (K,) copies computed
    ends: dict[tuple[int, int, int], _Ends] = field(default_factory=dict)  # per pod shape (cpu, milli, count)
    _masks: dict[bytes, np.ndarray | None] = field(default_factory=dict)  # scarce flags -> bit set

    @classmethod
    def build(cls, table: TypicalArrays, nodes: int) -> Scarcity:
        demand = float((table.freq * table.milli * table.num).sum())
        expected = table.freq / demand if demand > 0 else np.zeros_like(table.freq)
        width = table.milli.size
        words = max(1, -(-width // _WORD))
        return cls(
            table, expected, words, np.zeros(width, np.int64), np.full(nodes, -1, np.int64), np.full(width, np.inf)
        )

    def refresh(self, ids: np.ndarray, epoch: int, moved: list[int], state: State) -> None:
        """Count every node at its state id now (``ids``, of the state index's ``epoch``); ``moved``
        holds (at least) every node whose id was written since the last refresh, and is emptied."""
        if epoch != self.epoch:  # ids start over: nothing counted or cached means anything now
            width = self.table.milli.size
            self.epoch, self.ends = epoch, {}
            self.copies = np.zeros((0, width), np.int32)
            self.holds = np.zeros((0, self.words), np.uint64)
            self.known = np.zeros(0, bool)
            self.total[:] = 0
            self.counted[:] = -1
            moved[:] = range(len(ids))
        if not moved:
            return
        if len(moved) <= _FEW:  # one placement or two: plain numbers
            counted, changed = self.counted, False
            for n in dict.fromkeys(moved):
                sid, old = int(ids[n]), int(counted[n])
                if sid == old:
                    continue
                if sid >= len(self.known) or not self.known[sid]:
                    self._learn(np.array([sid]), np.array([n]), state)
                self.total += self.copies[sid]
                if old >= 0:
                    self.total -= self.copies[old]
                counted[n], changed = sid, True
        else:
            nodes = np.unique(np.array(moved, dtype=np.int64))
            sids, before = ids[nodes], self.counted[nodes]
            keep = before != sids
            nodes, sids, before = nodes[keep], sids[keep], before[keep]
            changed = bool(nodes.size)
            if changed:
                self._learn(sids, nodes, state)
                self.total += self.copies[sids].sum(axis=0, dtype=np.int64)
                self.total -= self.copies[before[before >= 0]].sum(axis=0, dtype=np.int64)
                self.counted[nodes] = sids
        moved.clear()
        if changed:
            self.floor = np.where(self.total > 0, self.total, np.inf)

    def _learn(self, sids: np.ndarray, nodes: np.ndarray, state: State) -> None:
        """Copies and bit sets of the states ``sids`` (node ``nodes[i]`` is in state ``sids[i]``)."""
        top = int(sids.max()) + 1
        if top > len(self.known):
            self.known = _grown(self.known, top)
            self.copies = _grown(self.copies, top)
            self.holds = _grown(self.holds, top)
        new = ~self.known[sids]
        if not new.any():
            return
        fresh, first = np.unique(sids[new], return_index=True)
        reps = nodes[new][first]
        cpu, gpu, row = state
        rows = copies_of(cpu[reps], gpu[reps], row[reps], self.table)
        self.copies[fresh] = rows
        self.holds[fresh] = _pack(rows > 0, self.words)
        self.known[fresh] = True

    def weights(self, free_milli: float) -> np.ndarray:
        """Per shape, ``E / (1 + E)`` (see the module docstring); 0 for shapes with no copy left."""
        return _weight(self.expected * free_milli / self.floor)

    def penalty(
        self,
        pod: PodShape,
        idx: np.ndarray,
        ids: np.ndarray,
        device: DeviceOf,
        state: State,
        free_milli: float,
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """The sum of the weights (at ``free_milli`` free) of the shapes nodes ``idx`` host now and
        not after placing ``pod`` there (a sharing pod on ``device[node]``, a whole-GPU pod on the
        lowest-indexed fully free devices), as ``(positions in idx, penalties)`` for the nodes that
        hold a scarce shape (0 on every other node); ``None`` when no node of ``idx`` holds one.
        ``ids`` every node's state id (as counted by the last ``refresh``), ``state`` all nodes'
        state."""
        need = self.expected * free_milli / self.floor
        scarce = need > SCARCITY_SLACK
        key = scarce.tobytes()
        if key in self._masks:
            mask = self._masks[key]
        else:
            packed = _pack(scarce[None, :], self.words)[0]
            mask = self._masks[key] = packed if packed.any() else None
        if mask is None:
            return None
        node_ids = ids[idx]
        if self.words == 1:
            rows = (self.holds[node_ids, 0] & mask[0]).nonzero()[0]
        else:
            rows = np.flatnonzero((self.holds[node_ids] & mask).any(axis=1))
        if rows.size == 0:
            return None
        sids = node_ids[rows]
        ends = self._ends_of(pod, sids, idx[rows], device, state)
        return rows, ends.lost[ends.slot[sids]][:, scarce] @ _weight(need[scarce])

    def _ends_of(self, pod: PodShape, sids: np.ndarray, nodes: np.ndarray, device: DeviceOf, state: State) -> _Ends:
        """``pod``'s ends table, computed for the states ``sids`` it lacks (``nodes[i]`` in ``sids[i]``)."""
        key = (pod.cpu_milli, pod.gpu_milli, pod.gpu_count)
        ends = self.ends.get(key)
        if ends is None:
            ends = self.ends[key] = _Ends(
                np.full(len(self.known), -1, np.int64), np.zeros((0, self.total.size), np.uint8)
            )
        elif len(ends.slot) < len(self.known):
            ends.slot = _grown(ends.slot, len(self.known), -1)
        slots = ends.slot[sids]
        if slots.min() >= 0:
            return ends
        new = slots < 0
        fresh, first = np.unique(sids[new], return_index=True)
        reps = nodes[new][first]
        cpu, gpu, row = state
        gpu_after = gpu[reps].copy()
        if pod.is_sharing:
            gpu_after[np.arange(reps.size), device[reps]] -= pod.gpu_milli
        elif pod.gpu_count > 0:
            whole = gpu_after >= MILLI
            gpu_after -= (whole & (np.cumsum(whole, axis=1) <= pod.gpu_count)) * pod.gpu_milli
        after = copies_of(cpu[reps] - pod.cpu_milli, gpu_after, row[reps], self.table)
        lost = ((self.copies[fresh] > 0) & (after == 0)).astype(np.uint8)
        ends.slot[fresh] = np.arange(len(ends.lost), len(ends.lost) + fresh.size)
        ends.lost = np.concatenate([ends.lost, lost])
        return ends


def _weight(need: np.ndarray) -> np.ndarray:
    """``E / (1 + E)`` with ``E = max(0, need - SCARCITY_SLACK)``."""
    excess = np.maximum(need - SCARCITY_SLACK, 0.0)
    return excess / (1.0 + excess)


def _pack(flags: np.ndarray, words: int) -> np.ndarray:
    """Bool rows (R, S) as bit sets (R, words) of uint64: bit ``s % 64`` of word ``s // 64``."""
    padded = np.zeros((flags.shape[0], words * _WORD), bool)
    padded[:, : flags.shape[1]] = flags
    return np.packbits(padded, axis=1, bitorder="little").view(np.uint64)
