"""Placement: which node and which devices each replica of a job takes.

For one replica of a shape (see ``scorers.Shape``):

1. Static filters, cached per (model, kind, selector, tolerations): GPU model, MIG mode, required
   node selector, taints (NoSchedule/NoExecute must be tolerated), cordon.
2. Dynamic fit, vectorised over the remaining nodes: enough fully free devices (whole GPUs), a device
   with enough free share (fractions), a MIG slice at a valid start (MIG), CPU and memory.
3. Score the feasible nodes: the placement scorer chosen for the node's pool, plus preferred-affinity
   weights, plus topology (for multi-replica jobs: the same node, rack, zone as replicas already placed;
   for the first replica, the tightest node, rack or zone that can hold the whole gang; for multi-GPU
   replicas, a node with a contiguous block of free devices). Highest wins; ties go to the node first
   in node order (GPU model, then name). A gang's next replica first tries the node the previous one
   went to.
4. Pick devices inside the node (the scorer's device picker, or the default packing one).

Scorers are plugins (``scorers.PLUGINS``; the FGD paper's policies are in ``fragplugins``).

A gang places replica by replica in a ``Statement``; the caller commits or discards it. A replica
first tries the node the previous one went to; while the replicas so far share one rack with room,
only that rack's nodes are candidates. When a replica does not fit, :meth:`Placer.explain` counts,
for every node, the first filter that rejected it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import fragplugins  # noqa: F401  (registers the FGD paper's policies)
from .capacity import FULL, Cluster, Statement
from .mig import COMPUTE_SLICES, devices_for_memory
from .model import Policy, ReplicaPlacement, Taint, Toleration, Workload
from .scorers import PLUGINS, PluginSetup, ScoreContext, ScorerPlugin, Shape, pick_devices

TOPOLOGY_WEIGHT = 2.0
AFFINITY_WEIGHT = 1.0
SOFT_TAINT_WEIGHT = 0.5
GPU_AVOID_WEIGHT = 1.0
CONTIGUOUS_WEIGHT = 0.2

# Explanation codes, in filter order: each node is counted once, under the first filter it fails.
FIT = 0
_REASONS = (
    "fit",
    "cordoned",
    "GPU model not allowed",
    "MIG mode does not match",
    "MIG profile not supported",
    "node selector does not match",
    "untolerated taint",
    "too few free GPUs",
    "not enough CPU",
    "not enough memory",
)
(
    _,
    CORDONED,
    MODEL,
    MIG_MODE,
    MIG_PROFILE,
    SELECTOR,
    TAINT,
    GPUS,
    CPU,
    MEMORY,
) = range(len(_REASONS))


def tolerates(tolerations: tuple[Toleration, ...], key: str, value: str, effect: str) -> bool:
    for tol in tolerations:
        if tol.effect and tol.effect != effect:
            continue
        if tol.operator == "Exists":
            if not tol.key or tol.key == key:
                return True
        elif tol.key == key and tol.value == value:
            return True
    return False


@dataclass(frozen=True, slots=True)
class GangResult:
    placements: tuple[ReplicaPlacement, ...]
    explanation: tuple[int, tuple[tuple[str, int], ...]] | None  # (fitting nodes, counts) on failure
    fit_count: int = 0  # on failure: how many replicas would have fitted


class Placer:
    """Placement over one :class:`Cluster` for one cycle, with its filter caches."""

    def __init__(
        self,
        cluster: Cluster,
        policy: Policy,
        mig_profiles: dict[str, tuple[str, ...]] | None = None,
        typical: tuple[tuple[int, int, int, tuple[str, ...]], ...] = (),
    ) -> None:
        """Build before any usage is applied to ``cluster``: stateful scorers mirror every change."""
        self.cluster = cluster
        self.policy = policy
        self.mig_profiles = mig_profiles or {}
        self._labels = [dict(node.labels) for node in cluster.nodes]
        self._shapes: dict[tuple[object, ...], Shape | str] = {}
        self._static: dict[tuple[object, ...], tuple[np.ndarray, np.ndarray, int]] = {}
        self._all = np.arange(cluster.n)
        self.rack, _ = cluster.label_codes(policy.rack_label)
        self.zone, _ = cluster.label_codes(policy.zone_label)
        self._rack_members = {int(code): np.flatnonzero(self.rack == code) for code in np.unique(self.rack)}
        self._pool_scorer = np.zeros(cluster.n, dtype=np.int32)
        self.scorer_names: list[str] = [policy.placement]
        if policy.pool_label:
            overrides = dict(policy.pool_placement)
            for i, labels in enumerate(self._labels):
                name = overrides.get(labels.get(policy.pool_label, ""), policy.placement)
                if name not in self.scorer_names:
                    self.scorer_names.append(name)
                self._pool_scorer[i] = self.scorer_names.index(name)
        for name in self.scorer_names:
            if name not in PLUGINS:
                raise ValueError(f"unknown placement policy {name!r}; known: {', '.join(sorted(PLUGINS))}")
        setup = PluginSetup(cluster, policy.seed, typical)
        self.plugins: list[ScorerPlugin] = [PLUGINS[name](setup) for name in self.scorer_names]
        self._taint_groups: dict[tuple[Taint, ...], list[int]] = {}
        for i, node in enumerate(cluster.nodes):
            self._taint_groups.setdefault(node.taints, []).append(i)
        self._tainted = np.array([bool(node.taints) for node in cluster.nodes], dtype=bool)
        self._tolerated_cache: dict[tuple[Toleration, ...], np.ndarray] = {}
        self._selector_cache: dict[tuple[tuple[str, str], ...], np.ndarray] = {}
        self._label_values: dict[str, np.ndarray] = {}
        self._soft_taint = np.array(
            [any(t.effect == "PreferNoSchedule" for t in node.taints) for node in cluster.nodes], dtype=bool
        )
        self._soft_taint_any = bool(self._soft_taint.any())
        self._fast_policy = (
            policy.placement
            if self.scorer_names == [policy.placement]
            and policy.placement
            in (
                "binpack",
                "spread",
            )
            else None
        )

    # -- shapes -----------------------------------------------------------------------------------

    def shape_for(self, workload: Workload, model: str | None) -> Shape | str:
        """The replica shape on GPU ``model``, or why the request cannot exist on that model."""
        key = (workload.resources, model)
        shape = self._shapes.get(key)
        if shape is None:
            shape = self._shapes[key] = self._shape_for(workload, model)
        return shape

    def _shape_for(self, workload: Workload, model: str | None) -> Shape | str:
        res = workload.resources
        base = {"gpu_model": model, "cpu_milli": res.cpu_milli, "memory_mib": res.memory_mib}
        if not res.wants_gpu:
            return Shape(**base)  # type: ignore[arg-type]
        if model is None:
            return "job wants a GPU but no GPU model is available"
        if res.mig_profile:
            supported = self.mig_profiles.get(model)
            if supported is not None and res.mig_profile not in supported:
                return f"{model} does not offer MIG profile {res.mig_profile}"
            geometry = self.cluster.mig(res.mig_profile, self.cluster.memory_of(model))
            if geometry is None:
                return f"MIG profile {res.mig_profile} does not exist on {model}"
            return Shape(mig=geometry, **base)  # type: ignore[arg-type]
        if res.gpu_memory_gib:
            memory = self.cluster.memory_of(model)
            if memory <= 0:
                return f"GPU memory of {model} is unknown"
            return Shape(gpus=devices_for_memory(res.gpu_memory_gib, memory), **base)  # type: ignore[arg-type]
        if res.gpu:
            return Shape(gpus=res.gpu, **base)  # type: ignore[arg-type]
        return Shape(milli=res.gpu_milli, **base)  # type: ignore[arg-type]

    # -- filters ----------------------------------------------------------------------------------

    def _static_codes(self, workload: Workload, shape: Shape, nodes: np.ndarray) -> np.ndarray:
        """First failing static filter per node in ``nodes`` (FIT when all pass), vectorised.

        Codes are written from the last filter to the first, so the first failing one wins.
        """
        cluster = self.cluster
        codes = np.zeros(len(nodes), dtype=np.int8)
        if workload.tolerations or self._tainted.any():
            codes[~self._tolerated(workload.tolerations)[nodes]] = TAINT
        if workload.node_selector:
            codes[~self._selected(workload.node_selector)[nodes]] = SELECTOR
        if shape.mig is not None:
            codes[~self._mig_supported(shape)[nodes]] = MIG_PROFILE
        if shape.kind != "cpu":
            codes[cluster.mig_node[nodes] != (shape.kind == "mig")] = MIG_MODE
        if shape.gpu_model is not None:
            code = cluster.model_code.get(shape.gpu_model, -2)
            codes[cluster.node_model[nodes] != code] = MODEL
        codes[cluster.cordoned[nodes]] = CORDONED
        return codes

    def _tolerated(self, tolerations: tuple[Toleration, ...]) -> np.ndarray:
        """Nodes whose NoSchedule/NoExecute taints are all tolerated (one check per distinct taint set)."""
        mask = self._tolerated_cache.get(tolerations)
        if mask is None:
            mask = np.ones(self.cluster.n, dtype=bool)
            for taints, members in self._taint_groups.items():
                ok = all(
                    tolerates(tolerations, t.key, t.value, t.effect)
                    for t in taints
                    if t.effect in ("NoSchedule", "NoExecute")
                )
                if not ok:
                    mask[members] = False
            self._tolerated_cache[tolerations] = mask
        return mask

    def _selected(self, selector: tuple[tuple[str, str], ...]) -> np.ndarray:
        mask = self._selector_cache.get(selector)
        if mask is None:
            mask = np.ones(self.cluster.n, dtype=bool)
            for key, value in selector:
                values = self._label_values.get(key)
                if values is None:
                    values = np.array([labels.get(key, "") for labels in self._labels], dtype=object)
                    self._label_values[key] = values
                mask &= values == value
            self._selector_cache[selector] = mask
        return mask

    def _mig_supported(self, shape: Shape) -> np.ndarray:
        """Nodes where the profile has the same geometry (same device memory, hence slice size)."""
        cluster = self.cluster
        assert shape.mig is not None
        mask = np.zeros(cluster.n, dtype=bool)
        for memory in np.unique(cluster.device_memory_gib).tolist():
            if cluster.mig(shape.mig.profile, int(memory)) == shape.mig:
                mask |= cluster.device_memory_gib == memory
        return mask

    def eligible(self, workload: Workload, shape: Shape) -> np.ndarray:
        """Node indices that pass every static filter (cached per shape-relevant key)."""
        return self._eligible(workload, shape)[1]

    def _eligible(self, workload: Workload, shape: Shape) -> tuple[np.ndarray, np.ndarray, int]:
        """(boolean mask over the model's node slice, node indices, slice start) of the nodes passing
        every static filter. A GPU model's nodes are one contiguous slice (see ``Cluster``)."""
        key = (shape.gpu_model, shape.kind, shape.mig, workload.node_selector, workload.tolerations)
        cached = self._static.get(key)
        if cached is None:
            if shape.gpu_model is None:
                lo, hi = 0, self.cluster.n
            else:
                lo, hi = self.cluster.model_slice.get(shape.gpu_model, (0, 0))
            pool = np.arange(lo, hi)
            codes = self._static_codes(workload, shape, pool)
            idx = pool[codes == FIT]
            cached = (codes == FIT, idx, lo)
            self._static[key] = cached
        return cached

    def _plain(
        self, workload: Workload, shape: Shape, gang_nodes: list[int], remaining: int, fast: bool = False
    ) -> bool:
        """Only the placement policy votes (see :meth:`_score`); with ``fast``, also the contiguity and
        GPU-avoidance votes, which :meth:`_fast_pick` adds itself (it does not handle MIG)."""
        if fast:
            kind_ok = shape.kind != "mig"
        else:
            kind_ok = shape.kind != "cpu" and shape.gpus <= 1
        return (
            kind_ok
            and len(self.scorer_names) == 1
            and not workload.preferred_labels
            and not self._soft_taint_any
            and remaining <= 1
            and not gang_nodes
        )

    def _fast_pick(self, shape: Shape, mask: np.ndarray, lo: int) -> int | None:
        """``binpack``/``spread`` with a single vote (plus contiguity for multi-GPU replicas), as a
        masked argmax over the model's slice: no gathering, no index arrays.

        Same scores as ``scorers.score_binpack`` (negated for spread), same tie-break (lowest index).
        """
        cluster = self.cluster
        hi = lo + len(mask)
        if hi == lo:
            return None
        if shape.kind == "whole":
            ok = mask & (cluster.full_free[lo:hi] >= shape.gpus)
        elif shape.kind == "fraction":
            ok = mask & (cluster.max_share[lo:hi] >= shape.milli)
        else:
            ok = mask.copy()
        if shape.cpu_milli:
            ok &= cluster.cpu_free[lo:hi] >= shape.cpu_milli
        if shape.memory_mib:
            ok &= cluster.mem_free[lo:hi] >= shape.memory_mib
        if shape.kind == "cpu":
            score = cluster.cpu_pack_score[lo:hi]
            if self._fast_policy == "spread":
                score = -score
            # GPU avoidance, strictly above the policy's range of about one unit.
            score = score - 2 * GPU_AVOID_WEIGHT * (cluster.gpu_count[lo:hi] > 0)
        else:
            score = cluster.pack_score[lo:hi]
            if self._fast_policy == "spread":
                score = -score
        if shape.gpus > 1:  # the contiguity vote, on the binpack scale (about one unit wide)
            bits = cluster.free_bits[lo:hi]
            run = bits.copy()
            for k in range(1, shape.gpus):
                run &= bits >> k
            score = score + CONTIGUOUS_WEIGHT * (run != 0)
        best = int(np.argmax(np.where(ok, score, -np.inf)))
        return lo + best if ok[best] else None

    def _feasible_mask(self, shape: Shape, mask: np.ndarray, lo: int) -> np.ndarray:
        """Feasible node indices, computed on array views of the model's slice (no gathering)."""
        cluster = self.cluster
        hi = lo + len(mask)
        if shape.kind == "whole":
            ok = mask & (cluster.full_free[lo:hi] >= shape.gpus)
        elif shape.kind == "fraction":
            ok = mask & (cluster.max_share[lo:hi] >= shape.milli)
        else:
            ok = mask
        if shape.cpu_milli:
            ok = ok & (cluster.cpu_free[lo:hi] >= shape.cpu_milli)
        if shape.memory_mib:
            ok = ok & (cluster.mem_free[lo:hi] >= shape.memory_mib)
        return np.flatnonzero(ok) + lo

    def _dynamic_codes(self, shape: Shape, idx: np.ndarray) -> np.ndarray:
        cluster = self.cluster
        codes = np.zeros(len(idx), dtype=np.int8)
        gpu_ok = self._gpu_fit(shape, idx)
        codes[~gpu_ok] = GPUS
        cpu_bad = cluster.cpu_free[idx] < shape.cpu_milli
        codes[(codes == FIT) & cpu_bad] = CPU
        mem_bad = cluster.mem_free[idx] < shape.memory_mib
        codes[(codes == FIT) & mem_bad] = MEMORY
        return codes

    def _gpu_fit(self, shape: Shape, idx: np.ndarray) -> np.ndarray:
        cluster = self.cluster
        if shape.kind == "whole":
            return cluster.full_free[idx] >= shape.gpus
        if shape.kind == "fraction":
            return cluster.max_share[idx] >= shape.milli
        if shape.kind == "mig":
            geometry = shape.mig
            assert geometry is not None
            masks = cluster.mig_mask[idx]
            exists = np.arange(cluster.width)[None, :] < cluster.gpu_count[idx][:, None]
            room = exists & (cluster.mig_compute[idx] + geometry.compute <= COMPUTE_SLICES)
            any_start = np.zeros(masks.shape, dtype=bool)
            for start in geometry.starts:
                any_start |= (masks & geometry.mask_at(start)) == 0
            return (room & any_start).any(axis=1)
        return np.ones(len(idx), dtype=bool)

    def feasible(self, shape: Shape, idx: np.ndarray) -> np.ndarray:
        cluster = self.cluster
        ok = self._gpu_fit(shape, idx)
        if shape.cpu_milli:
            ok &= cluster.cpu_free[idx] >= shape.cpu_milli
        if shape.memory_mib:
            ok &= cluster.mem_free[idx] >= shape.memory_mib
        return idx[ok]

    # -- scoring ----------------------------------------------------------------------------------

    def replica_capacity(self, shape: Shape, idx: np.ndarray) -> np.ndarray:
        """How many more replicas of ``shape`` each node could hold (MIG: at most 1 counted)."""
        cluster = self.cluster
        big = np.iinfo(np.int64).max // 4
        cap = np.full(len(idx), big, dtype=np.int64)
        if shape.kind == "whole":
            cap = np.minimum(cap, cluster.full_free[idx] // shape.gpus)
        elif shape.kind == "fraction":
            cap = np.minimum(cap, (np.clip(cluster.dev_free[idx], 0, None) // shape.milli).sum(axis=1))
        elif shape.kind == "mig":
            cap = np.minimum(cap, self._gpu_fit(shape, idx).astype(np.int64))
        if shape.cpu_milli:
            cap = np.minimum(cap, cluster.cpu_free[idx] // shape.cpu_milli)
        if shape.memory_mib:
            cap = np.minimum(cap, cluster.mem_free[idx] // shape.memory_mib)
        return np.where(cap == big, 1, cap)

    def _score(
        self,
        workload: Workload,
        shape: Shape,
        cand: np.ndarray,
        gang_nodes: list[int],
        remaining: int,
        eligible: np.ndarray,
    ) -> np.ndarray:
        if self._plain(workload, shape, gang_nodes, remaining):  # one vote only: its own scale is as good as any
            ctx = ScoreContext(self.cluster, shape, cand, workload.id, self.policy.seed)
            return np.asarray(self.plugins[0].score(ctx), dtype=np.float64)
        total = np.zeros(len(cand), dtype=np.float64)
        scorer_of = self._pool_scorer[cand]
        for s in range(len(self.scorer_names)):
            part = cand if len(self.scorer_names) == 1 else cand[scorer_of == s]
            if len(part) == 0:
                continue
            ctx = ScoreContext(self.cluster, shape, part, workload.id, self.policy.seed)
            raw = np.asarray(self.plugins[s].score(ctx), dtype=np.float64)
            if len(self.scorer_names) == 1:
                total += _unit(raw)
            else:
                total[scorer_of == s] += _unit(raw)
        if workload.preferred_labels:
            weights = np.zeros(len(cand), dtype=np.float64)
            for key, value, weight in workload.preferred_labels:
                weights += weight * self._selected(((key, value),))[cand]
            total += AFFINITY_WEIGHT * _unit(weights)
        if self._soft_taint_any:
            soft = self._soft_taint[cand] & np.array(
                [
                    not all(
                        tolerates(workload.tolerations, t.key, t.value, t.effect)
                        for t in self.cluster.nodes[i].taints
                        if t.effect == "PreferNoSchedule"
                    )
                    for i in cand.tolist()
                ],
                dtype=bool,
            )
            total -= SOFT_TAINT_WEIGHT * soft
        if shape.kind == "cpu":
            # Strictly above the policy's unit range, as in :meth:`_fast_pick`: at equal weight the
            # fullest GPU node tied with the emptiest CPU node and won on node order.
            total -= 2 * GPU_AVOID_WEIGHT * (self.cluster.gpu_count[cand] > 0)
        if remaining > 1 or gang_nodes:
            total += TOPOLOGY_WEIGHT * self._topology(shape, cand, gang_nodes, remaining, eligible)
        if shape.gpus > 1:
            total += CONTIGUOUS_WEIGHT * self._contiguous(shape, cand)
        return total

    def _topology(
        self, shape: Shape, cand: np.ndarray, gang_nodes: list[int], remaining: int, eligible: np.ndarray
    ) -> np.ndarray:
        """Keep a gang together, in tiers: same node 1, same rack 0.6, same zone 0.3 as replicas already
        placed. For the first replica: a node, else a rack, else a zone that can hold the whole gang, and
        within a tier the tightest such domain (keeps big free blocks for big gangs)."""
        score = np.zeros(len(cand), dtype=np.float64)
        rack, zone = self.rack, self.zone
        if gang_nodes:
            used = np.array(gang_nodes)
            for weight, codes in ((0.3, zone), (0.6, rack)):
                seen = np.zeros(int(codes.max(initial=-1)) + 2, dtype=bool)
                seen[codes[used] + 1] = True
                seen[0] = False  # nodes without the label share nothing
                score = np.where(seen[codes[cand] + 1], weight, score)
            return np.where((cand[:, None] == used[None, :]).any(axis=1), 1.0, score)
        # Infeasible nodes hold no replica, so the candidates' capacities are the domains' capacities.
        node_cap = self.replica_capacity(shape, cand)
        for weight, codes in ((0.3, zone), (0.6, rack)):
            cand_codes = codes[cand]
            if (cand_codes >= 0).any():
                domain_cap = np.bincount(cand_codes + 1, weights=node_cap, minlength=int(codes.max()) + 2)
                cap_here = domain_cap[cand_codes + 1]
                holds = (cand_codes >= 0) & (cap_here >= remaining)
                tight = remaining / np.maximum(cap_here, 1)
                score = np.where(holds, weight + 0.1 * tight, score)
        holds = node_cap >= remaining
        return np.where(holds, 1.0 + 0.1 * remaining / np.maximum(node_cap, 1), score)

    def _contiguous(self, shape: Shape, cand: np.ndarray) -> np.ndarray:
        """1 where the node has ``shape.gpus`` fully free devices with consecutive indices (NVLink
        neighbours on most boards), else 0. A run of g ones in the free-device bitmask survives g-1
        shift-and-ands."""
        bits = self.cluster.free_bits[cand]
        run = bits.copy()
        for k in range(1, shape.gpus):
            run &= bits >> k
        return (run != 0).astype(np.float64)

    # -- placing ----------------------------------------------------------------------------------

    def place_one(
        self,
        workload: Workload,
        shape: Shape,
        stmt: Statement,
        gang_nodes: list[int],
        remaining: int,
        node: int | None = None,
    ) -> ReplicaPlacement | None:
        """Place one replica (on ``node`` only, when given: it must already be eligible)."""
        if node is not None:
            cand = eligible = self.feasible(shape, np.array([node]))
        elif self._fast_policy is not None and self._plain(workload, shape, gang_nodes, remaining, fast=True):
            mask, eligible, lo = self._eligible(workload, shape)
            best_or_none = self._fast_pick(shape, mask, lo)
            if best_or_none is None:
                return None
            cand = np.array([best_or_none])
        else:
            mask, eligible, lo = self._eligible(workload, shape)
            if len(eligible) == 0:
                return None
            in_rack = self._same_rack(shape, mask, lo, gang_nodes)
            if in_rack is not None:
                cand = in_rack
            elif shape.kind == "mig":
                cand = self.feasible(shape, eligible)
            else:
                cand = self._feasible_mask(shape, mask, lo)
        if len(cand) == 0:
            return None
        if len(cand) == 1:
            best = int(cand[0])
        else:
            scores = self._score(workload, shape, cand, gang_nodes, remaining, eligible)
            best = int(cand[int(np.argmax(scores))])
        plugin = self.plugins[int(self._pool_scorer[best])]
        picked = plugin.pick(self.cluster, best, shape, workload.id)
        devices, slot = picked if picked is not None else pick_devices(self.cluster, best, shape)
        if shape.kind != "cpu" and not devices:
            return None  # cannot happen when the fit test agrees with the picker
        placement = ReplicaPlacement(
            node=self.cluster.nodes[best].name,
            gpu_indices=devices,
            gpu_milli=0 if shape.mig is not None else (FULL if shape.gpus else shape.milli),
            mig_profile=shape.mig.profile if shape.mig is not None else None,
            mig_slot=slot,
            cpu_milli=shape.cpu_milli,
            memory_mib=shape.memory_mib,
        )
        stmt.take(placement)
        return placement

    def place_gang(
        self, workload: Workload, shape: Shape, stmt: Statement, wanted: int, needed: int, explain: bool = True
    ) -> GangResult:
        """Place up to ``wanted`` replicas; succeeds when at least ``needed`` fit (else places none).

        On failure the result explains the first replica that did not fit, unless ``explain`` is
        false (trial placements during victim selection), when it is an empty explanation.
        """
        if needed > 1 and shape.kind != "mig":
            # Replicas are identical and each takes exactly one unit of a node's replica capacity,
            # so the summed capacity is exactly how many fit: fail before placing any.
            eligible = self.eligible(workload, shape)
            capacity = int(self.replica_capacity(shape, self.feasible(shape, eligible)).sum())
            if capacity < needed:
                explanation = self._explain_after(workload, shape, stmt, capacity) if explain else (0, ())
                return GangResult((), explanation, capacity)
        placements: list[ReplicaPlacement] = []
        gang_nodes: list[int] = []
        last: int | None = None
        while len(placements) < wanted:
            # Fill the node the previous replica went to before scoring again: replicas of a gang
            # on one node talk over NVLink/shared memory, and it saves a scoring pass per replica.
            placement = None
            if last is not None and self._fits_node(shape, last):
                placement = self.place_one(workload, shape, stmt, gang_nodes, wanted - len(placements), last)
            if placement is None:
                placement = self.place_one(workload, shape, stmt, gang_nodes, wanted - len(placements))
            if placement is None:
                break
            placements.append(placement)
            last = self.cluster.index[placement.node]
            gang_nodes.append(last)
        if len(placements) >= needed:
            return GangResult(tuple(placements), None)
        explanation = self.explain(workload, [shape]) if explain else (0, ())
        stmt.discard()
        return GangResult((), explanation, len(placements))

    def can_place(self, workload: Workload, shape: Shape, needed: int) -> bool:
        """Whether ``needed`` replicas fit now, without placing them (exact; MIG by a trial)."""
        if shape.kind == "mig":
            trial = Statement(self.cluster)
            ok = self.place_gang(workload, shape, trial, needed, needed, explain=False).explanation is None
            trial.discard()
            return ok
        mask, eligible, lo = self._eligible(workload, shape)
        if len(eligible) == 0:
            return False
        cand = self._feasible_mask(shape, mask, lo)
        if needed <= 1 or len(cand) >= needed:
            return len(cand) >= needed
        return int(self.replica_capacity(shape, cand).sum()) >= needed

    def _same_rack(self, shape: Shape, mask: np.ndarray, lo: int, gang_nodes: list[int]) -> np.ndarray | None:
        """Feasible nodes in the rack of the gang's replicas so far, when they share one rack and it
        still has room; ``None`` otherwise (then every node is a candidate). Keeps a gang in the fewest
        racks and scores a few dozen nodes instead of thousands."""
        if not gang_nodes:
            return None
        rack = int(self.rack[gang_nodes[0]])
        if rack < 0 or any(int(self.rack[i]) != rack for i in gang_nodes):
            return None
        members = self._rack_members[rack]
        members = members[(members >= lo) & (members < lo + len(mask))]
        members = members[mask[members - lo]]
        cand = self.feasible(shape, members)
        return cand if len(cand) else None

    def _fits_node(self, shape: Shape, i: int) -> bool:
        """Scalar pre-check that one more replica fits node ``i`` (MIG: leave it to the full test)."""
        c = self.cluster
        if c.cpu_free[i] < shape.cpu_milli or c.mem_free[i] < shape.memory_mib:
            return False
        if shape.kind == "whole":
            return bool(c.full_free[i] >= shape.gpus)
        if shape.kind == "fraction":
            return bool(c.max_share[i] >= shape.milli)
        return True

    def _explain_after(
        self, workload: Workload, shape: Shape, stmt: Statement, count: int
    ) -> tuple[int, tuple[tuple[str, int], ...]]:
        """Explain the replica after the first ``count``: place them, explain, undo."""
        trial = Statement(self.cluster)
        gang_nodes: list[int] = []
        for k in range(count):
            placement = self.place_one(workload, shape, trial, gang_nodes, count - k)  # no same-node fill
            if placement is None:
                break
            gang_nodes.append(self.cluster.index[placement.node])
        explanation = self.explain(workload, [shape])
        trial.discard()
        return explanation

    def explain(self, workload: Workload, shapes: list[Shape]) -> tuple[int, tuple[tuple[str, int], ...]]:
        """Count nodes by the first filter that rejects one more replica of any of ``shapes``.

        Returns (number of nodes that fit, ((reason, count), ...) largest count first).
        """
        cluster = self.cluster
        codes = np.full(cluster.n, MODEL, dtype=np.int8)
        for shape in shapes:
            if shape.gpu_model is None:
                nodes = self._all
            else:
                nodes = np.flatnonzero(cluster.node_model == cluster.model_code.get(shape.gpu_model, -2))
            static = self._static_codes(workload, shape, nodes)
            dynamic = self._dynamic_codes(shape, nodes)
            mine = np.where(static != FIT, static, dynamic)
            codes[nodes] = mine
        cordoned = cluster.cordoned
        codes[cordoned] = CORDONED
        counts = np.bincount(codes, minlength=len(_REASONS))
        words = list(_REASONS)
        kinds = {shape.kind for shape in shapes}
        if kinds == {"fraction"}:
            words[GPUS] = f"no GPU with {shapes[0].milli / 1000:g} free"
        elif kinds == {"mig"} and shapes[0].mig is not None:
            words[GPUS] = f"no free MIG slice for {shapes[0].mig.profile}"
        pairs = sorted(
            ((words[c], int(counts[c])) for c in range(1, len(_REASONS)) if counts[c]),
            key=lambda p: (-p[1], p[0]),
        )
        return int(counts[FIT]), tuple(pairs)


def _unit(raw: np.ndarray) -> np.ndarray:
    """Scale scores to [0, 1] over the candidates (all equal -> all zero)."""
    if len(raw) == 0:
        return raw
    low = raw.min()
    span = raw.max() - low
    if span <= 0 or not np.isfinite(span):
        return np.zeros_like(raw)
    return (raw - low) / span
