"""Placement policies from the FGD paper as the engine's scorer plugins: fgd, portal, dotprod,
clustering, packing, bestfit (over ``NodeScorer``), plus random.

``NodeScorer`` keeps its own free-capacity arrays; the plugin notes every node the cycle's ``Cluster``
changes (``Cluster.listeners``) and copies those nodes' state into the scorer right before it scores
(``NodeScorer.sync``; clustering, which counts pods per node, binds every change), so the paper's
scores, caches and device choices are computed on exactly the state the engine sees. MIG nodes and MIG requests are
outside the paper's model: MIG nodes are given to the scorer as CPU-only nodes and MIG replicas are
scored by bin-packing.

The workload mix FGD measures against is every replica shape in the snapshot (:func:`workload_mix`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..capacity import FULL, Cluster
from ..mig import default_device_memory_gib, devices_for_memory
from ..model import Policy, ReplicaPlacement, Resources, Snapshot
from ..scorers import (
    DevicePick,
    PluginSetup,
    ScoreContext,
    Shape,
    pick_devices,
    register_plugin,
    score_binpack,
    stable_random,
)
from .arrays import Choice, NodeArrays, PodShape
from .scorer import NodeScorer
from .states import DeviceOf
from .workload import Shape4, typical_pods

# Policies that score without the workload mix (computing it costs a pass over all jobs).
_MIX_FREE = frozenset({"binpack", "spread", "random"})
_FEW = 8  # up to this many changed nodes are synced one by one


def workload_mix(snapshot: Snapshot, policy: Policy) -> tuple[Shape4, ...]:
    """``PluginSetup.typical`` for ``policy``: the snapshot's replica shapes (one entry per replica)
    when a fragmentation-aware scorer is in use, else nothing.

    A GPU-memory request counts as whole GPUs of the smallest device memory among its allowed models.
    MIG requests are left out (outside FGD's model).
    """
    pools = {pool.placement for pool in snapshot.pools if pool.placement}
    if not {policy.placement, *(name for _, name in policy.pool_placement), *pools} - _MIX_FREE:
        return ()
    return replica_shapes(snapshot)


def replica_shapes(snapshot: Snapshot) -> tuple[Shape4, ...]:
    """Every replica shape of the snapshot's workloads (pending, admitted and running), one entry per
    replica, in FGD's terms: the job mix its fragmentation is measured against (see
    :func:`workload_mix` for how GPU-memory and MIG requests are counted)."""
    memory = dict(snapshot.gpu_memory_gib)
    for node in snapshot.nodes:
        if node.gpu_model and node.gpu_memory_gib:
            memory.setdefault(node.gpu_model, node.gpu_memory_gib)
    out: list[Shape4] = []
    seen: dict[tuple[object, ...], Shape4 | None] = {}  # jobs of one request share their entry
    for w in snapshot.workloads:
        key = (w.resources, w.allowed_gpu_models)
        try:  # one lookup when seen (the usual case): the key hashes a request's every field
            entry = seen[key]
        except KeyError:
            entry = seen[key] = _replica_shape(w.resources, w.allowed_gpu_models, memory)
        if entry is not None:
            out.extend([entry] * w.replicas)
    return tuple(out)


def _replica_shape(res: Resources, allowed: tuple[str, ...], memory: dict[str, int]) -> Shape4 | None:
    if res.gpu:
        return (res.cpu_milli, FULL, res.gpu, allowed)
    if res.gpu_milli:
        return (res.cpu_milli, res.gpu_milli, 1, allowed)
    if res.gpu_memory_gib:
        sizes = [memory.get(m, 0) or default_device_memory_gib(m) for m in allowed]
        size = min([s for s in sizes if s > 0] or [80])
        return (res.cpu_milli, FULL, devices_for_memory(res.gpu_memory_gib, size), allowed)
    if res.mig_profile:
        return None
    return (res.cpu_milli, 0, 0, ())


def _pod_of(shape: Shape) -> PodShape:
    if shape.gpus:
        return PodShape(shape.cpu_milli, shape.memory_mib, FULL, shape.gpus)
    if shape.milli:
        return PodShape(shape.cpu_milli, shape.memory_mib, shape.milli, 1)
    return PodShape(shape.cpu_milli, shape.memory_mib, 0, 0)


class FragPlugin:
    """One of the paper's policies over a ``NodeScorer`` mirrored from the cluster."""

    def __init__(self, name: str, setup: PluginSetup) -> None:
        cluster = setup.cluster
        self.cluster = cluster
        self.name = name
        rows = [
            (
                node.name,
                None if node.mig_enabled else node.gpu_model,
                0 if node.mig_enabled else node.gpu_count,
                node.cpu_milli,
                node.memory_mib,
            )
            for node in cluster.nodes
        ]
        typical = typical_pods(setup.typical) if setup.typical else ()
        self.frag_policy = name if (typical or name not in ("fgd", "portal")) else None
        self.scorer: NodeScorer | None = None
        self._arrays = NodeArrays.of(rows)
        self._typical = typical
        if self.frag_policy is not None:
            if self.frag_policy == "clustering":
                # Its per-node pod counts by GPU count need every placement: mirror from the start.
                self.scorer = NodeScorer(self._arrays, self.frag_policy, typical=typical)
            cluster.listeners.append(self._mirror)
        self._dirty: list[int] = []  # nodes changed since the scorer last saw them
        self._width = 0
        self._exists = np.zeros((0, 0), dtype=bool)
        self._device: DeviceOf | None = None
        self._device_key: tuple[int, int, int] | None = None
        self._counts: list[int] = []
        self._caps: list[int] = []
        self._pods: dict[Shape, PodShape] = {}

    def _ready(self) -> NodeScorer | None:
        """The scorer, built on first use from the cluster's free capacity as it is then (one
        vectorised load instead of a ``bind`` per running replica), then brought up to date with the
        nodes the cluster changed since (``_mirror``, ``NodeScorer.sync``)."""
        if self.scorer is None and self.frag_policy is not None:
            scorer = NodeScorer(self._arrays, self.frag_policy, typical=self._typical)
            self._width = scorer.gpu_free_milli.shape[1]
            self._exists = np.arange(min(self._width, self.cluster.width))[None, :] < scorer.nodes.gpu_count[:, None]
            self._dirty.clear()
            # Per node, as plain numbers for the one-by-one sync: devices the scorer sees, share capacity.
            self._counts = np.where(self.cluster.mig_node, 0, self.cluster.gpu_count).tolist()
            self._caps = self.cluster.dev_cap.tolist()
            scorer.load(*self._rows(slice(None)))
            self.scorer = scorer
        elif self._dirty and self.scorer is not None:
            changed, self._dirty = self._dirty, []
            dirty = set(changed) if len(changed) > 1 else changed
            if len(dirty) > _FEW:
                nodes = np.array(sorted(dirty), dtype=np.int64)
                self.scorer.sync(nodes, *self._rows(nodes))
            else:  # a placement or two since the last score: scalar work beats array calls
                c, width, counts, caps = self.cluster, self._width, self._counts, self._caps
                dev_free, cpu_free, mem_free, sync_node = c.dev_free, c.cpu_free, c.mem_free, self.scorer.sync_node
                for i in dirty:
                    count, taken = counts[i], FULL - caps[i]
                    row = dev_free[i].tolist()
                    if count < len(row):
                        row = row[:count]
                    if taken or (row and not 0 <= min(row) <= max(row) <= FULL):  # else clipping changes nothing
                        row = [min(max(taken + v, 0), FULL) for v in row]
                    if count < width:
                        row += [-1] * (width - count)
                    sync_node(i, cpu_free.item(i), mem_free.item(i), row)
        return self.scorer

    def _rows(self, nodes: np.ndarray | slice) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The cluster's free CPU, memory and per-device GPU of ``nodes`` as the scorer holds them."""
        c = self.cluster
        cols = min(self._width, c.width)
        # A device's free share as the paper's model sees it (of ``FULL``): what an overcommitted pool
        # adds beyond one device is not there for whole-GPU pods. MIG nodes have no devices here.
        taken = (c.dev_cap[nodes, None] - c.dev_free[nodes, :cols]).astype(np.int64)
        dev = np.full((len(taken), self._width), -1, dtype=np.int64)
        dev[:, :cols] = np.where(self._exists[nodes], np.clip(FULL - taken, 0, FULL), -1)  # 0 on MIG nodes
        return c.cpu_free[nodes], c.mem_free[nodes], dev

    def _mirror(self, i: int, placement: ReplicaPlacement, sign: int) -> None:
        if self.scorer is None:
            return  # not built yet: it will load the cluster's state as it is then
        if self.frag_policy != "clustering":
            self._dirty.append(i)  # synced before the next score (``_ready``)
            return
        # Clustering counts pods per node by their GPU count: every change one by one.
        if placement.mig_profile is not None or self.cluster.mig_node[i]:
            if not placement.cpu_milli and not placement.memory_mib:
                return
            indices: tuple[int, ...] = ()
        else:
            count = int(self.cluster.gpu_count[i])
            indices = tuple(d for d in placement.gpu_indices if d < count)
        pod = PodShape(placement.cpu_milli, placement.memory_mib, placement.gpu_milli if indices else 0, len(indices))
        choice = Choice(i, indices)
        if sign > 0:
            self.scorer.bind(pod, choice)
        else:
            self.scorer.release(pod, choice)

    def score(self, ctx: ScoreContext) -> np.ndarray:
        scorer = self._ready()
        if scorer is None or ctx.shape.kind == "mig":
            return score_binpack(ctx)
        pod = self._pod(ctx.shape)
        if self.frag_policy == "packing" and pod.gpu_milli <= 0:
            return np.zeros(len(ctx.idx))
        scores, device = scorer.score_nodes(pod, ctx.idx)
        if self.frag_policy in ("fgd", "portal"):
            self._device = device
            self._device_key = (pod.cpu_milli, pod.gpu_milli, pod.gpu_count)
        return np.asarray(scores, dtype=np.float64)

    def follows_nodes(self, shape: Shape) -> bool:
        """Whether :meth:`score` of a node depends only on that node's own state (fgd; portal without
        the terms read from the whole cluster, model pressure and scarcity), so that a node that did
        not change keeps its score (``votes.Trail``)."""
        scorer = self.scorer
        if scorer is None or self.frag_policy not in ("fgd", "portal") or shape.kind == "mig":
            return False
        return scorer.state_only(self._pod(shape))

    def score_at(self, shape: Shape, nodes: np.ndarray) -> np.ndarray | None:
        """``score`` of the (feasible) ``nodes`` for one replica (not MIG) under fgd or portal, without a
        ``ScoreContext``; ``None`` where only ``score`` answers."""
        scorer = self._ready()
        if scorer is None or self.frag_policy not in ("fgd", "portal") or shape.kind == "mig":
            return None
        pod = self._pod(shape)
        scores, self._device = scorer.score_nodes(pod, nodes)
        self._device_key = (pod.cpu_milli, pod.gpu_milli, pod.gpu_count)
        return scores

    def _pod(self, shape: Shape) -> PodShape:
        """``_pod_of(shape)``, built once per shape."""
        pod = self._pods.get(shape)
        if pod is None:
            pod = self._pods[shape] = _pod_of(shape)
        return pod

    def pick(self, cluster: Cluster, i: int, shape: Shape, workload_id: str) -> DevicePick | None:
        if (
            shape.kind == "fraction"
            and self._device is not None
            and self._device_key == (shape.cpu_milli, shape.milli, 1)
        ):
            device = int(self._device[i])
            if 0 <= device < cluster.gpu_count[i] and cluster.dev_free[i, device] >= shape.milli:
                return (device,), None
        return pick_devices(cluster, i, shape)


def _frag_factory(name: str) -> Callable[[PluginSetup], FragPlugin]:
    def build(setup: PluginSetup) -> FragPlugin:
        return FragPlugin(name, setup)

    return build


for _name in ("fgd", "portal", "dotprod", "clustering", "packing", "bestfit"):
    register_plugin(_name, _frag_factory(_name))


class RandomPlugin:
    """The paper's Random baseline: a uniformly random feasible node and device, seeded per job."""

    def __init__(self, setup: PluginSetup) -> None:
        self.seed = setup.seed

    def score(self, ctx: ScoreContext) -> np.ndarray:
        return stable_random(ctx.workload_id, ctx.seed, len(ctx.idx))

    def pick(self, cluster: Cluster, i: int, shape: Shape, workload_id: str) -> DevicePick | None:
        if shape.kind != "fraction":
            return None
        count = int(cluster.gpu_count[i])
        fits = [d for d in range(count) if cluster.dev_free[i, d] >= shape.milli]
        if not fits:
            return None
        draw = stable_random(f"{workload_id}/{i}", self.seed, 1)[0]
        return (fits[int(draw * len(fits))],), None


register_plugin("random", RandomPlugin)
__all__ = ["FragPlugin", "RandomPlugin", "workload_mix"]
