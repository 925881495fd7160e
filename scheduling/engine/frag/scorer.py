"""``NodeScorer``: the FGD paper's policies as node scores over free-capacity arrays it keeps current.

Per pod shape, the score of every candidate node (higher wins; ties are the caller's):

* ``fgd``: FGD's integer score ``int(100 * sigmoid((F_before - F_after) / 1000))`` for the decrease of
  the node's fragmentation (``measure.frag_milli``); a sharing pod tries every fitting device and keeps
  the first best one.
* ``portal`` (our default): for a GPU pod, first the lowest model pressure (``pressure``: the GPU
  models constrained pods need the least; all equal when no typical pod names a model), then for
  every pod the least scarcity penalty (``scarcity``: do not end a node's ability to hold a shape of
  the whole workload that few places are left for; 0 while no shape is scarce), then FGD's decision,
  refined only where FGD's coarse integer scores tie. The score is one float that compares like the
  key (pressure level, scarcity, FGD's integer score, secondary): for a GPU-sharing
  pod the tightest device (least milli left on it after placement); for a CPU-only pod the least free
  GPU on the node, then the least free CPU (CPU stays free where GPUs are still free); for other pods
  the decrease of stranded GPU (``measure.stranded_milli``); a sharing pod's last key, only while the
  cluster is CPU-bound (``cpubound``), is the node's free GPU. docs/simulator.md has the measurements,
  including the alternatives that did not work.
* the baselines (``baselines``); ``random`` scores all nodes equal.

Scores are cached per pod shape and node state (``states``: every node's state id is kept current by
every ``bind``/``release``/``sync``; a shape computes each state once); a bind after a scoring pass
reuses the measured state of the chosen node. The cluster fragmentation (FGD's measure, whatever the
policy) is kept current for ``frag_milli()``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .arrays import MILLI, POLICIES, Choice, NodeArrays, PodShape
from .baselines import AFFINITY_TAGS, affinity_tag, bestfit, clustering, dotprod, packing
from .cpubound import cpu_bound, cpu_per_gpu_milli, spread_weight
from .deltas import LEX, Delta, NodesState, devices_delta, node_delta, sharing_delta
from .measure import (
    NodeMeasures,
    TypicalRows,
    frag_and_stranded,
    frag_milli,
)
from .pressure import demand_share, pressure_levels
from .scarcity import Scarcity
from .states import DeviceOf, NodeDevices, ShapeTable, StateIndex
from .workload import TypicalArrays, TypicalPod

_PRESSURE_UNIT = 200 * LEX  # one model pressure level: above FGD's whole 0..100 range
_SCARCITY_UNIT = 150 * LEX  # scarcity penalty, mapped into [0, 1): above FGD's 0..100, below a pressure level
_FEW_MISSING = 4  # portal: up to this many node states not met before are computed without arrays

ShapeKey = tuple[int, int, int]  # (cpu_milli, gpu_milli, gpu_count): what a node's score depends on


@dataclass(slots=True)
class _NodeMeasure:
    """The policy's measure of each node as it is now (fgd: FGD's fragmentation; portal: stranded GPU)."""

    version: np.ndarray  # (N,) node version each entry was computed at (-1 = never)
    score: np.ndarray  # (N,) float

    @classmethod
    def empty(cls, n: int) -> _NodeMeasure:
        return cls(np.full(n, -1, np.int64), np.zeros(n))


@dataclass(slots=True)
class NodeScorer:
    """Free capacity of ``nodes`` (mutable copies) and the policy's node scores on it.

    ``typical`` is required for ``fgd`` and ``portal`` (and gives every policy ``frag_milli()``). Seed
    existing usage with ``bind`` before scoring.
    """

    nodes: NodeArrays
    policy: str
    typical: Sequence[TypicalPod] = ()
    workload: Sequence[TypicalPod] = ()  # portal: every shape of the workload; scarcity only with it
    cpu_free_milli: np.ndarray = field(init=False)  # (N,) live, read only
    memory_free_mib: np.ndarray = field(init=False)  # (N,)
    gpu_free_milli: np.ndarray = field(init=False)  # (N, max_gpus); -1 pads absent devices
    _affinity: np.ndarray = field(init=False)  # (N, AFFINITY_TAGS) pod counts per clustering tag
    _version: np.ndarray = field(init=False)
    _model_row: np.ndarray = field(init=False)
    _table: TypicalArrays | None = field(init=False)  # the typical pods as arrays (FGD's table)
    _measures: NodeMeasures | None = field(init=False)  # portal's one-node path: its measures, memoised
    _frag_cache: _NodeMeasure | None = field(init=False)  # fgd/portal: the policy's measure per node now
    _metric_node: np.ndarray = field(init=False)  # (N,) FGD fragmentation per node where _metric_fresh
    _metric_fresh: np.ndarray = field(init=False)  # (N,) bool; stale entries are measured when read
    _metric_total: float = field(init=False)
    _gpu_free_total: np.ndarray = field(init=False)  # (N,) free milli summed over devices
    _row_free: np.ndarray = field(init=False)  # _gpu_free_total summed per model row, kept in step
    _gpu_max: np.ndarray = field(init=False)  # (N,) largest free milli on one device
    _gpu_full: np.ndarray = field(init=False)  # (N,) fully free devices
    _last: tuple[ShapeKey, ShapeTable] | None = field(init=False)
    _metric_memo: dict[tuple[int, int, bytes], float] = field(init=False)
    _states: StateIndex = field(init=False)  # every node's state id, kept current
    _row_of: list[int] = field(init=False)  # _model_row as plain numbers
    _tables: dict[ShapeKey, ShapeTable] = field(init=False)  # fgd/portal: each shape's rows per state
    _press_share: np.ndarray | None = field(init=False, default=None)
    _press_any: bool = field(init=False, default=True)  # whether any row has a demand share (else no term)
    _scarcity: Scarcity | None = field(init=False, default=None)
    _kappa: float = field(init=False, default=0.0)  # portal: expected CPU per GPU milli (``cpubound``)
    _gpu_nodes: np.ndarray = field(init=False)  # (N,) bool: nodes with GPUs
    _gpu_node_of: list[bool] = field(init=False)  # _gpu_nodes as plain values
    _cpu_free_gpu_nodes: int = field(init=False, default=0)  # free CPU milli over the GPU nodes, kept in step
    _spread_weight: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"unknown placement policy {self.policy!r}; expected one of {', '.join(POLICIES)}")
        if self.policy in ("fgd", "portal") and not self.typical:
            raise ValueError(f"policy {self.policy!r} needs the typical pods (see typical_pods())")
        n, d = len(self.nodes), self.nodes.max_gpus
        self.cpu_free_milli = self.nodes.cpu_milli.astype(np.int64).copy()
        self.memory_free_mib = self.nodes.memory_mib.astype(np.int64).copy()
        dev = np.arange(d)[None, :]
        self.gpu_free_milli = np.where(dev < self.nodes.gpu_count[:, None], MILLI, -1).astype(np.int64)
        self._affinity = np.zeros((n, AFFINITY_TAGS), dtype=np.int64)
        self._version = np.zeros(n, dtype=np.int64)
        self._model_row = np.where(self.nodes.model_ids >= 0, self.nodes.model_ids, len(self.nodes.models))
        self._states = StateIndex(n, d)
        self._gpu_nodes = self.nodes.gpu_count > 0
        self._gpu_node_of = self._gpu_nodes.tolist()
        self._row_of = self._model_row.tolist()
        self._tables = {}
        self._gpu_free_total = np.maximum(self.gpu_free_milli, 0).sum(axis=1)
        self._row_free = self._rows_free()
        self._cpu_free_gpu_nodes = int(self.cpu_free_milli[self._gpu_nodes].sum())
        self._gpu_max = self.gpu_free_milli.max(axis=1)
        self._gpu_full = np.count_nonzero(self.gpu_free_milli == MILLI, axis=1)
        self._metric_memo = {}
        self._last = None
        self._table = TypicalArrays.build(self.typical, self.nodes.models) if self.typical else None
        portal_rows = TypicalRows.of(self._table) if self._table is not None and self.policy == "portal" else None
        self._measures = NodeMeasures(portal_rows) if portal_rows is not None else None
        self._frag_cache = None
        self._metric_node = np.zeros(n)
        self._metric_fresh = np.ones(n, dtype=bool)
        self._metric_total = 0.0
        if self._table is not None:
            self._metric_node = frag_milli(self.cpu_free_milli, self.gpu_free_milli, self._model_row, self._table)
            self._metric_total = float(self._metric_node.sum())
            if self.policy in ("fgd", "portal"):
                self._frag_cache = _NodeMeasure.empty(n)
            if self.policy == "portal":
                self._kappa = cpu_per_gpu_milli(self.typical)
                self._spread_weight = spread_weight(MILLI * int(self.nodes.gpu_count.max(initial=0)))
            if self.policy == "portal" and self.workload:
                shapes = TypicalArrays.build(self.workload, self.nodes.models)
                self._scarcity = Scarcity.build(shapes, n)
                self._states.moved = []  # the nodes scarcity recounts

    # -------------------------------------------------------------------------------------- scores
    def score_nodes(self, pod: PodShape, idx: np.ndarray) -> tuple[np.ndarray, NodeDevices | None]:
        """The policy's scores for the (feasible) nodes ``idx``; higher is better.

        Returns ``(scores, device)``; ``device`` (indexed by node, not by position in ``idx``) is the
        device FGD/portal would give a GPU-sharing pod, ``None`` for other policies. Random has no
        scores (all zero). Ties are the caller's to break.
        """
        if self.policy in ("fgd", "portal"):
            return self._frag_scores(pod, idx)
        if self.policy == "random":
            return np.zeros(idx.size), None
        return self._baseline_scores(pod, idx), None

    def state_only(self, pod: PodShape) -> bool:
        """Whether :meth:`score_nodes` gives each node a score that depends only on its own state (and
        the pod): fgd; portal once its model pressure term is known to be off (no typical pod is
        constrained) for a GPU pod, without a scarcity term, and not for a sharing pod (its CPU-bound
        key, ``cpubound``, depends on the whole cluster's free CPU and GPU)."""
        if self.policy == "fgd":
            return True
        if self.policy != "portal" or self._scarcity is not None:
            return False
        if pod.is_sharing and self._kappa > 0:
            return False
        return pod.gpu_count == 0 or (self._press_share is not None and not self._press_any)

    def _baseline_scores(self, pod: PodShape, idx: np.ndarray) -> np.ndarray:
        free_total = self._gpu_free_total[idx]
        if self.policy == "dotprod":
            return dotprod(pod, self.cpu_free_milli[idx], free_total)
        if self.policy == "bestfit":
            return bestfit(pod, self.cpu_free_milli[idx], free_total)
        if self.policy == "clustering":
            return clustering(pod, free_total, self._affinity[idx])
        if self.policy == "packing":
            return packing(pod, self.gpu_free_milli[idx], self.nodes.gpu_count[idx])
        raise AssertionError(self.policy)

    def _frag_scores(self, pod: PodShape, idx: np.ndarray) -> tuple[np.ndarray, NodeDevices]:
        """FGD/portal score of each feasible node (and the device for sharing pods), cached per shape
        and node state."""
        key, table, ids = self._table_of(pod)
        node_ids = ids[idx]
        score = table.values[:, 0][node_ids]  # a copy (fancy indexing; one column's gather is cheaper)
        if math.isnan(np.add.reduce(score)):  # a state not known yet (its score is NaN), or a NaN score
            self._fill(pod, table, idx, node_ids)
            score = table.values[:, 0][node_ids]
        device = table.devices(ids)
        self._last = (key, table)
        if self.policy == "portal":
            if self._scarcity is not None:
                self._scarcity_term(pod, idx, ids, device, score)
            if pod.gpu_count > 0 and (pressure := self._pressure_term(idx)) is not None:
                score += pressure
            if pod.is_sharing and self._cpu_bound():
                score += self._spread_weight * self._gpu_free_total[idx]
        return score, device

    def _table_of(self, pod: PodShape) -> tuple[ShapeKey, ShapeTable, np.ndarray]:
        """The shape's key and table (with room for every state id) and every node's state id now."""
        key = (pod.cpu_milli, pod.gpu_milli, pod.gpu_count)
        table = self._tables.get(key)
        if table is None:
            table = self._tables[key] = ShapeTable()
        ids = self._states.current(self._model_row, self.cpu_free_milli, self.gpu_free_milli)
        table.fit(len(self._states), self._states.epoch)
        return key, table, ids

    def _fill(self, pod: PodShape, table: ShapeTable, idx: np.ndarray, node_ids: np.ndarray) -> None:
        """Compute the rows of the states of nodes ``idx`` (their ids ``node_ids``) that ``table`` does
        not know yet: each distinct state once, on the first node in it. A row depends only on the
        shape and the state (``_frag_delta``), so where it is computed does not matter."""
        known = table.known[node_ids]
        if np.count_nonzero(known) == len(known):  # all known (``all()`` costs a Python-level call)
            return
        unknown = ~known
        nodes, sids = idx[unknown], node_ids[unknown]
        if nodes.size <= _FEW_MISSING and self._measures is not None:
            # A few states not met before (the usual case within a cycle): one node at a time, no arrays.
            values, known = table.values, table.known
            for n, sid in zip(nodes.tolist(), sids.tolist(), strict=True):
                if not known[sid]:
                    values[sid] = self._frag_delta_one(pod, n, self._measures)
                    known[sid] = True
            return
        distinct, first = np.unique(sids, return_index=True)
        table.values[distinct] = np.column_stack(self._frag_delta(pod, nodes[first]))
        table.known[distinct] = True

    def _scarcity_term(
        self, pod: PodShape, idx: np.ndarray, ids: np.ndarray, device: DeviceOf, score: np.ndarray
    ) -> None:
        """portal's key after model pressure and before FGD's score: minus the scarcity penalty of
        placing ``pod`` on each node of ``idx`` (``scarcity``; ``ids`` every node's state id now),
        mapped into less than one pressure level, added to ``score`` (aligned with ``idx``)."""
        scarcity = self._scarcity
        assert scarcity is not None
        moved = self._states.moved
        assert moved is not None
        state = (self.cpu_free_milli, self.gpu_free_milli, self._model_row)
        scarcity.refresh(ids, self._states.epoch, moved, state)
        found = scarcity.penalty(pod, idx, ids, device, state, float(self._row_free.sum()))
        if found is not None:
            rows, penalty = found
            score[rows] -= _SCARCITY_UNIT * penalty / (1.0 + penalty)

    def _pressure_term(self, nodes: np.ndarray | slice) -> np.ndarray | None:
        """portal's first key for a GPU pod: minus the model pressure level of each node of ``nodes``
        (``pressure``), in units above FGD's whole score range; ``None`` when every
        level is 0 (no typical pod is constrained, or no model is under pressure now): then there is
        nothing to add."""
        if not self._press_any:
            return None
        table = self._table
        assert table is not None
        rows = len(self.nodes.models) + 1
        if self._press_share is None:
            capacity = np.bincount(self._model_row, weights=self.nodes.gpu_count.astype(np.float64), minlength=rows)
            self._press_share = demand_share(table, capacity)
            self._press_any = bool(self._press_share.any())
            if not self._press_any:
                return None
        levels = pressure_levels(self._press_share, self._row_free)
        if not levels.any():
            return None
        return (-_PRESSURE_UNIT * levels)[self._model_row[nodes]]  # per row, then per node: the same floats

    def _cpu_bound(self) -> bool:
        """portal: whether filling the free GPU with the expected pods needs more CPU than is free
        (``cpubound``); then a sharing pod's last key before node order is the most free GPU."""
        return cpu_bound(self._kappa, float(self._row_free.sum()), self._cpu_free_gpu_nodes)

    def _rows_free(self) -> np.ndarray:
        """Free GPU milli per model row (``_row_free``, which the state changes keep in step: sums of
        whole numbers, so the same floats in any order)."""
        rows = len(self.nodes.models) + 1
        return np.bincount(self._model_row, weights=self._gpu_free_total.astype(np.float64), minlength=rows)

    def _frag_delta(self, pod: PodShape, idx: np.ndarray) -> Delta:
        """(score, device, the policy's measure after, FGD's measure after) of placing ``pod`` on each
        of ``idx``, from the decrease of the policy's measure (before - after)."""
        before = self._node_frag(idx)
        table = self._table
        assert table is not None
        state = NodesState(
            self.cpu_free_milli[idx] - pod.cpu_milli,
            self.gpu_free_milli[idx],
            self._model_row[idx],
            self._metric_node[idx],
            self._gpu_free_total[idx],
        )
        if pod.is_sharing:
            return sharing_delta(pod, self.policy, table, before, state)
        return devices_delta(pod, self.policy, table, before, state)

    def _frag_delta_one(self, pod: PodShape, n: int, measure: NodeMeasures) -> list[float]:
        """portal's ``_frag_delta`` of node ``n`` alone, as a memo row, without arrays: the same floats
        (``deltas.node_delta``; ``test_one_node_scores_equal_the_array_pass``)."""
        cache = self._frag_cache
        assert cache is not None
        row = int(self._model_row[n])
        cpu_now = int(self.cpu_free_milli[n])
        if cache.version[n] != self._version[n]:  # _node_frag of one node
            frag, stranded = measure(cpu_now, self.gpu_free_milli[n].tolist(), row)
            cache.score[n] = stranded
            cache.version[n] = self._version[n]
            self._metric_total += float(frag - self._metric_node[n])
            self._metric_node[n] = frag
            self._metric_fresh[n] = True
        state = (cpu_now, self.gpu_free_milli[n].tolist(), row, int(self._gpu_free_total[n]))
        return node_delta(pod, float(cache.score[n]), float(self._metric_node[n]), state, measure)

    def _node_frag(self, idx: np.ndarray) -> np.ndarray:
        """The policy's measure of nodes ``idx`` as they are now (cached per node version)."""
        table, cache = self._table, self._frag_cache
        assert table is not None
        assert cache is not None
        stale = idx[cache.version[idx] != self._version[idx]]
        if stale.size:
            state = (self.cpu_free_milli[stale], self.gpu_free_milli[stale], self._model_row[stale], table)
            if self.policy == "portal":
                frag, cache.score[stale] = frag_and_stranded(*state)
            else:
                frag = cache.score[stale] = frag_milli(*state)
            cache.version[stale] = self._version[stale]
            # The same pass measured FGD's fragmentation of these nodes: keep the metric in step.
            self._metric_total += float((frag - self._metric_node[stale]).sum())
            self._metric_node[stale] = frag
            self._metric_fresh[stale] = True
        return cache.score[idx]

    def _refresh_metric(self) -> None:
        """Measure the nodes whose FGD fragmentation went stale (changed without a known state)."""
        stale = np.flatnonzero(~self._metric_fresh)
        if stale.size == 0:
            return
        if stale.size == 1:
            values = np.array([self._metric_of(int(stale[0]))])
        else:
            assert self._table is not None
            values = frag_milli(
                self.cpu_free_milli[stale], self.gpu_free_milli[stale], self._model_row[stale], self._table
            )
        self._metric_total += float((values - self._metric_node[stale]).sum())
        self._metric_node[stale] = values
        self._metric_fresh[stale] = True

    def invalidate(self) -> None:
        """Forget every cached score (call after changing the free-capacity arrays directly)."""
        self._tables.clear()
        self._states.mark(range(len(self.nodes)))
        self._last = None
        if self._frag_cache is not None:
            self._frag_cache.version[:] = -1
        if self._table is not None:
            self._metric_node = frag_milli(self.cpu_free_milli, self.gpu_free_milli, self._model_row, self._table)
            self._metric_total = float(self._metric_node.sum())
            self._metric_fresh[:] = True
        self._gpu_free_total = np.maximum(self.gpu_free_milli, 0).sum(axis=1)
        self._row_free = self._rows_free()
        self._cpu_free_gpu_nodes = int(self.cpu_free_milli[self._gpu_nodes].sum())
        self._gpu_max = self.gpu_free_milli.max(axis=1)
        self._gpu_full = np.count_nonzero(self.gpu_free_milli == MILLI, axis=1)

    def load(self, cpu_free_milli: np.ndarray, memory_free_mib: np.ndarray, gpu_free_milli: np.ndarray) -> None:
        """Take a whole free-capacity state at once (``gpu_free_milli`` as ``self.gpu_free_milli``:
        -1 pads absent devices), instead of one ``bind`` per pod. Clustering's per-node pod counts are
        not part of the state: they come only from ``bind``."""
        self.cpu_free_milli[:] = cpu_free_milli
        self.memory_free_mib[:] = memory_free_mib
        self.gpu_free_milli[:] = gpu_free_milli
        self._version += 1
        self.invalidate()

    def sync(self, nodes: np.ndarray, cpu: np.ndarray, memory: np.ndarray, gpu: np.ndarray) -> None:
        """Take the free capacity of ``nodes`` as it is now (rows as in :meth:`load`): what a run of
        ``bind``/``release`` calls on them left, in one vectorised step. Nodes whose state did not
        change keep their cached scores; the others are rescored (and measured) when next read.
        Clustering's per-node pod counts are not part of the state: they come only from ``bind``."""
        changed = (
            (self.cpu_free_milli[nodes] != cpu)
            | (self.memory_free_mib[nodes] != memory)
            | (self.gpu_free_milli[nodes] != gpu).any(axis=1)
        )
        if not changed.any():
            return
        nodes, gpu = nodes[changed], gpu[changed]
        on_gpus = self._gpu_nodes[nodes]
        self._cpu_free_gpu_nodes += int(cpu[changed][on_gpus].sum() - self.cpu_free_milli[nodes][on_gpus].sum())
        self.cpu_free_milli[nodes] = cpu[changed]
        self.memory_free_mib[nodes] = memory[changed]
        self.gpu_free_milli[nodes] = gpu
        before = self._gpu_free_total[nodes]
        self._gpu_free_total[nodes] = np.maximum(gpu, 0).sum(axis=1)
        np.add.at(self._row_free, self._model_row[nodes], self._gpu_free_total[nodes] - before)
        self._gpu_max[nodes] = gpu.max(axis=1)
        self._gpu_full[nodes] = np.count_nonzero(gpu == MILLI, axis=1)
        self._version[nodes] += 1
        self._states.mark(nodes.tolist())
        self._last = None
        if self._table is not None:
            self._metric_fresh[nodes] = False

    def sync_node(self, n: int, cpu: int, memory: int, gpu: list[int]) -> None:
        """:meth:`sync` of one node (plain numbers: cheaper than arrays for one row)."""
        # ``item``: plain numbers, cheaper than numpy scalars (a hot path)
        if (
            cpu == self.cpu_free_milli.item(n)
            and memory == self.memory_free_mib.item(n)
            and gpu == self.gpu_free_milli[n].tolist()
        ):
            return
        if self._gpu_node_of[n]:
            self._cpu_free_gpu_nodes += cpu - self.cpu_free_milli.item(n)
        self.cpu_free_milli[n] = cpu
        self.memory_free_mib[n] = memory
        self.gpu_free_milli[n] = gpu
        total = sum([v for v in gpu if v > 0])
        row = self._row_of[n]
        self._row_free[row] += total - self._gpu_free_total.item(n)
        self._gpu_free_total[n] = total
        self._gpu_max[n] = max(gpu)
        self._gpu_full[n] = gpu.count(MILLI)
        self._version[n] = self._version.item(n) + 1
        self._states.set_one(n, row, cpu, gpu)
        self._last = None
        if self._table is not None:
            self._metric_fresh[n] = False

    # ------------------------------------------------------------------------------ state changes
    def bind(self, pod: PodShape, choice: Choice) -> None:
        """Take ``pod``'s resources on ``choice.node`` (the devices in ``choice.gpu_indices``)."""
        self._change(pod, choice, -1)

    def release(self, pod: PodShape, choice: Choice) -> None:
        self._change(pod, choice, +1)

    def _change(self, pod: PodShape, choice: Choice, sign: int) -> None:
        n = choice.node
        self.cpu_free_milli[n] += sign * pod.cpu_milli
        if self._gpu_node_of[n]:
            self._cpu_free_gpu_nodes += sign * pod.cpu_milli
        self.memory_free_mib[n] += sign * pod.memory_mib
        for d in choice.gpu_indices:
            self.gpu_free_milli[n, d] += sign * pod.gpu_milli
            self._gpu_free_total[n] += sign * pod.gpu_milli
            self._row_free[self._model_row[n]] += sign * pod.gpu_milli
        if pod.gpu_count > 0:
            self._affinity[n, affinity_tag(pod)] -= sign
        if choice.gpu_indices:
            devices = self.gpu_free_milli[n]
            self._gpu_max[n] = devices.max()
            self._gpu_full[n] = np.count_nonzero(devices == MILLI)
        known = self._known_after(pod, choice, sign)
        self._version[n] += 1
        self._states.set_one(n, self._row_of[n], int(self.cpu_free_milli[n]), self.gpu_free_milli[n].tolist())
        if known is not None and self._frag_cache is not None:
            # The scoring pass already measured this exact state: reuse it instead of recomputing.
            self._frag_cache.score[n] = known[0]
            self._frag_cache.version[n] = self._version[n]
        if self._table is not None:
            value = self._metric_after(known)
            if value is None:
                self._metric_fresh[n] = False  # measured when next read (a stale node's score or frag_milli)
                return
            self._metric_total += value - self._metric_node[n]
            self._metric_node[n] = value
            self._metric_fresh[n] = True
            if self.policy == "fgd" and self._frag_cache is not None:  # fgd's measure is the metric
                self._frag_cache.score[n] = value
                self._frag_cache.version[n] = self._version[n]

    def _known_after(self, pod: PodShape, choice: Choice, sign: int) -> tuple[float, float] | None:
        """(measure, FGD measure) of ``choice.node`` after binding, if the last scoring pass computed them."""
        last, self._last = self._last, None
        if sign > 0 or last is None or self._frag_cache is None:
            return None
        key, table = last
        if key != (pod.cpu_milli, pod.gpu_milli, pod.gpu_count):
            return None
        sid = self._states.known_id(choice.node)  # its state before this change (ids move after)
        if sid is None or table.epoch != self._states.epoch or sid >= len(table.known) or not table.known[sid]:
            return None
        row = table.values[sid]
        if pod.is_sharing and choice.gpu_indices != (int(row[1]),):
            return None
        return float(row[2]), float(row[3])

    def _metric_after(self, known: tuple[float, float] | None) -> float | None:
        """The node's FGD fragmentation after a change, if the last scoring pass measured it."""
        if known is not None and self.policy == "fgd":
            return known[0]  # fgd: the policy's measure is the metric
        if known is not None and not np.isnan(known[1]):
            return known[1]  # portal: its primary key is the metric
        return None

    def _metric_of(self, n: int) -> float:
        """FGD fragmentation of node ``n``, memoised by node state (states repeat a lot)."""
        devices = self.gpu_free_milli[n]
        key = (int(self._model_row[n]), int(self.cpu_free_milli[n]), np.sort(devices).tobytes())
        value = self._metric_memo.get(key)
        if value is None:
            assert self._table is not None
            row = slice(n, n + 1)
            value = float(
                frag_milli(self.cpu_free_milli[row], self.gpu_free_milli[row], self._model_row[row], self._table)[0]
            )
            self._metric_memo[key] = value
        return value

    # ------------------------------------------------------------------------------ fragmentation
    def frag_milli(self) -> float:
        """Cluster fragmentation in milli-GPU: free GPU the typical pods cannot use, by frequency.

        Always FGD's definition (0 without typical pods), whatever the policy.
        """
        self._refresh_metric()
        return self._metric_total

    def node_frag_milli(self) -> np.ndarray:
        """Per-node fragmentation (milli-GPU), FGD's definition."""
        self._refresh_metric()
        return self._metric_node.copy()
