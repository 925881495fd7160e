"""Votes: how much each candidate node is wanted for one more replica (``placement``'s step 3).

The placement scorer chosen for the node's pool (``scorers.PLUGINS``), scaled to [0, 1] over the
candidates, plus side votes with kube-scheduler's weights: preferred node affinity, untolerated
PreferNoSchedule taints, GPU avoidance for CPU-only work, the job's rules between replicas
(anti-affinity, topology spread), keeping a gang together (same node, rack, zone; for the first
replica the tightest domain that holds the whole gang) and a contiguous block of free devices for
multi-GPU replicas. The votes combine here and only here (:meth:`Votes.score`); highest wins, ties go
to the first node in node order.

When only the placement policy votes on a single replica, two fast paths test the fit rule on the GPU
model's block of nodes in place and skip the general scoring: :meth:`Votes.fast_pick` (binpack,
spread: a masked argmax over the block) and :meth:`Votes.block_pick` (a plugin that scores nodes
directly, fgd and portal: its scores of the feasible nodes only). Both pick the node the scored path
picks (``test_the_fast_path_picks_the_node_the_scored_path_picks``). A gang's next replica may be
scored from its predecessor's arrays (:class:`Trail`); it lands where scoring afresh sends it
(``test_a_gangs_next_replica_goes_where_scoring_it_afresh_sends_it``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from . import fit
from .affinity import by_max, preferred_terms_of
from .filters import StaticFilters
from .fit import Nodes, Shape
from .frag import plugins as _frag_plugins  # noqa: F401  (registers the FGD paper's policies)
from .model import Policy, PreferredTerm, Workload
from .replicas import GangRules
from .scorers import PLUGINS, PluginSetup, ScoreContext, ScorerPlugin, binpack_scores

# Side votes, relative to the placement policy's 1. Where kube-scheduler has the same plugin, its
# default profile's weight (NodeResourcesFit 1): NodeAffinity 2, TaintToleration 3,
# InterPodAffinity 2, PodTopologySpread 2.
TOPOLOGY_WEIGHT = 2.0
AFFINITY_WEIGHT = 2.0
SOFT_TAINT_WEIGHT = 3.0
INTER_POD_WEIGHT = 2.0
SPREAD_WEIGHT = 2.0
GPU_AVOID_WEIGHT = 1.0
CONTIGUOUS_WEIGHT = 0.2
# Policies whose scores are shares of a node (about one unit wide): side votes add to them directly.
_UNIT_SCALE_POLICIES = ("binpack", "spread")


@dataclass(slots=True)
class Trail:
    """A gang's previous scored replica (no placement rules, not MIG, one scorer), so that its next
    replica is scored from that replica's arrays (``placement.Placer._place_replicas``).

    Between the two only the chosen node changed (the replicas between them filled it, and the fill
    test found it full before the next replica is scored), so when the previous candidates were the
    model's whole block (``cand``, the gang's replicas then not in one rack with room), the next
    replica's candidates are the same without the chosen node, and their raw policy scores (when the
    scorer's depend only on each node's own state, ``follows_nodes``) and contiguity votes too.
    """

    cand: np.ndarray | None = None  # the previous scored replica's candidates (None: not reusable)
    placed: int = 0  # how many replicas the gang had placed then
    position: int = -1  # where the node it chose is in ``cand``
    chosen: int = -1  # that node
    raw: np.ndarray | None = None  # the single scorer's raw scores of ``cand``, when reusable
    contiguous: np.ndarray | None = None  # the contiguity votes of ``cand`` (multi-GPU replicas)
    following: bool = False  # this call's candidates are ``cand`` without ``chosen``

    def follows(self, gang_nodes: Sequence[int]) -> bool:
        """Whether every replica placed since the previous scored one went to its chosen node (the
        gang's replicas then were not in one rack with room, so they are not now either)."""
        if self.cand is None or self.placed == 0 or len(gang_nodes) <= self.placed:
            return False
        chosen = self.chosen
        return all(node == chosen for node in gang_nodes[self.placed :])


class Votes:
    """The scorers of one cycle (one per pool policy in use) and the side votes, over one cluster."""

    def __init__(self, policy: Policy, filters: StaticFilters, setup: PluginSetup, fast_path: bool) -> None:
        """The plugins are built from ``setup`` before any usage is applied to its cluster (stateful
        scorers follow every change); ``fast_path`` false always takes the scored path."""
        cluster = setup.cluster
        self.cluster = cluster
        self.policy = policy
        self.filters = filters
        self.rack, _ = cluster.label_codes(policy.rack_label)
        self.zone, _ = cluster.label_codes(policy.zone_label)
        # The highest code of each (static) label, read by every topology vote.
        self.rack_top, self.zone_top = int(self.rack.max(initial=-1)), int(self.zone.max(initial=-1))
        # The GPU-avoidance vote's penalty per node (static): CPU-only work avoids GPU nodes.
        self.gpu_avoid = 2 * GPU_AVOID_WEIGHT * (cluster.gpu_count > 0)
        # Its one value when every node has the same (every node has GPUs, or none): subtracted as a
        # number, the same floats as the per-node array's, without gathering it per candidate.
        avoid = np.unique(self.gpu_avoid)
        self._avoid_same: float | None = float(avoid[0]) if len(avoid) == 1 else None
        self.rack_of: list[int] = self.rack.tolist()  # the same codes as plain numbers, per node
        self._zone_of: list[int] = self.zone.tolist()
        # Each rack's and zone's nodes (static), for the topology vote of a gang's next replica.
        self._rack_members = _members(self.rack, self.rack_top)
        self._zone_members = _members(self.zone, self.zone_top)
        # The first replica's tiers (zone, then rack), each label's codes shifted by one (0: no label)
        # and how many codes that makes; a label no node has is left out (it changes no score).
        self._domain_levels = [
            (weight, (codes + 1).astype(np.intp), top + 2)
            for weight, codes, top in ((0.3, self.zone, self.zone_top), (0.6, self.rack, self.rack_top))
            if top >= 0
        ]
        self.scorer_names, self.pool_scorer = self.pool_scorers()
        self.plugins: list[ScorerPlugin] = [PLUGINS[name](setup) for name in self.scorer_names]
        single = self.scorer_names == [policy.placement]
        self.unit_scale = single and policy.placement in _UNIT_SCALE_POLICIES
        self.fast = self.unit_scale and fast_path
        self.fast_path = fast_path
        # A single plugin that scores nodes without a ScoreContext (fgd, portal): see :meth:`block_pick`.
        block = self.plugins[0] if single and fast_path else None
        self.block: ScorerPlugin | None = block if hasattr(block, "score_at") else None
        self._tiers: _GangTiers | None = None  # the topology tiers of the gang being placed
        self._preferred: dict[
            tuple[tuple[str, str, int], ...], tuple[PreferredTerm, ...]
        ] = {}  # see :meth:`preferred_terms`

    def trail(self) -> Trail | None:
        """A new :class:`Trail` for one gang's replicas, when one scorer scores every node (and the fast
        paths are on: ``test_a_gangs_next_replica_goes_where_scoring_it_afresh_sends_it`` compares)."""
        return Trail() if self.fast_path and len(self.scorer_names) == 1 else None

    def pool_scorers(self) -> tuple[list[str], np.ndarray]:
        """The scorer names in use and, per node, the index of its pool's scorer among them."""
        policy = self.policy
        names = [policy.placement]
        per_node = np.zeros(self.cluster.n, dtype=np.int32)
        pools = self.cluster.pools
        if policy.pool_label or any(pool.placement for pool in pools):
            overrides = dict(policy.pool_placement)
            node_pool = self.cluster.node_pool.tolist()
            for i, labels in enumerate(self.filters.labels):
                name = pools[node_pool[i]].placement if node_pool[i] >= 0 else ""
                if not name and policy.pool_label:
                    name = overrides.get(labels.get(policy.pool_label, ""), "")
                name = name or policy.placement
                if name not in names:
                    names.append(name)
                per_node[i] = names.index(name)
        for name in names:
            if name not in PLUGINS:
                raise ValueError(f"unknown placement policy {name!r}; known: {', '.join(sorted(PLUGINS))}")
        return names, per_node

    def single_vote(self, workload: Workload, gang_nodes: Sequence[int], remaining: int) -> bool:
        """Only the placement policy votes: one scorer, one replica, no preferences, no soft taints
        (the GPU-avoidance and contiguity votes aside, see :meth:`single_vote_score`)."""
        return (
            len(self.scorer_names) == 1
            and not workload.preferred_labels
            and workload.rules is None
            and not self.filters.any_soft_taint
            and remaining <= 1
            and not gang_nodes
        )

    # -- scoring ----------------------------------------------------------------------------------

    def single_vote_score(self, shape: Shape, nodes: Nodes, raw: np.ndarray) -> np.ndarray:
        """The policy's own score plus the votes a single replica still gets, on the policy's scale:
        CPU-only work avoids GPU nodes (strictly beyond the policy's range of about one unit),
        multi-GPU replicas prefer a contiguous block of free devices."""
        if shape.kind == "cpu":
            return raw - self._avoid(nodes)
        if shape.gpus > 1:
            return raw + CONTIGUOUS_WEIGHT * fit.contiguous(self.cluster, shape.gpus, nodes)
        return raw

    def _avoid(self, nodes: Nodes) -> np.ndarray | float:
        """The GPU-avoidance penalty of ``nodes``: one number when every node has the same."""
        return self.gpu_avoid[nodes] if self._avoid_same is None else self._avoid_same

    def fast_pick(self, shape: Shape, mask: np.ndarray, lo: int) -> int | None:
        """``binpack``/``spread`` when only they vote: a masked argmax over the model's block of nodes
        (no gathering, no index arrays); the same scores and tie-break (lowest index) as the scored path."""
        hi = lo + len(mask)
        if hi == lo:
            return None
        nodes = slice(lo, hi)
        ok = fit.fits(self.cluster, shape, nodes, within=mask)
        raw = binpack_scores(self.cluster, shape, nodes)
        if self.policy.placement == "spread":
            raw = -raw
        score = self.single_vote_score(shape, nodes, raw)
        best = int(np.argmax(np.where(ok, score, -np.inf)))
        return lo + best if ok[best] else None

    def block_pick(self, plugin: ScorerPlugin, shape: Shape, mask: np.ndarray, lo: int) -> int | bool | None:
        """The scored path's choice for one replica (not MIG) under a single plugin that scores nodes
        without a ``ScoreContext`` (fgd, portal): the fit rule over the GPU model's block of nodes, its
        scores of the feasible ones only, with the votes :meth:`score` adds for it; the same first-best
        node. ``False`` when the plugin cannot score them."""
        if len(mask) == 0:
            return None
        pos = fit.fits(self.cluster, shape, slice(lo, lo + len(mask)), within=mask).nonzero()[0]
        if len(pos) <= 1:  # as the scored path: no scoring for one candidate
            return lo + int(pos[0]) if len(pos) else None
        nodes = pos + lo
        scores = plugin.score_at(shape, nodes)  # type: ignore[attr-defined]
        if scores is None:
            return False
        if shape.kind == "cpu" or shape.gpus > 1:
            # As :meth:`score` for these: the policy's scores scaled over the candidates, then the
            # side votes a single replica still gets (GPU avoidance, contiguity).
            scores = _unit(scores)
            if shape.kind == "cpu":
                scores -= self._avoid(nodes)
            if shape.gpus > 1:
                scores += CONTIGUOUS_WEIGHT * fit.contiguous(self.cluster, shape.gpus, nodes)
        return int(nodes[scores.argmax()])  # the first best; all -inf: the first candidate

    def score(
        self,
        workload: Workload,
        shape: Shape,
        cand: np.ndarray,
        gang_nodes: Sequence[int],
        remaining: int,
        gang: GangRules | None = None,
        node_cap: np.ndarray | None = None,
        trail: Trail | None = None,
    ) -> np.ndarray:
        """How much each candidate node is wanted; the votes combine here and only here. ``node_cap``:
        the candidates' replica capacity (``fit.replica_capacity``), when the caller has it. ``trail``:
        a gang's previous scored replica (see :class:`Trail`): read when it is ``following``, and
        written with this call's arrays."""
        if self.single_vote(workload, gang_nodes, remaining) and (
            self.unit_scale or (shape.kind != "cpu" and shape.gpus <= 1)
        ):
            # One vote (plus the side votes on a unit-scale policy): its own scale is as good as any.
            ctx = ScoreContext(self.cluster, shape, cand, workload.id, self.policy.seed)
            return self.single_vote_score(shape, cand, np.asarray(self.plugins[0].score(ctx), dtype=np.float64))
        if trail is not None:
            total = _unit(self._trail_raw(workload, shape, cand, trail))
        else:
            total = self.policy_votes(workload, shape, cand)
        preferred = self.preferred_terms(workload)
        if preferred:
            # kube-scheduler's NodeAffinity score: the matched terms' weights over the highest.
            total += AFFINITY_WEIGHT * by_max(self.filters.index.preferred(preferred, cand))
        if self.filters.any_soft_taint:
            # TaintToleration's score: untolerated PreferNoSchedule taints over the highest count.
            total -= SOFT_TAINT_WEIGHT * by_max(self.filters.soft_taints_untolerated(workload.tolerations)[cand])
        if shape.kind == "cpu":
            # Strictly above the policy's unit range, as in :meth:`single_vote_score`: at equal weight
            # the fullest GPU node tied with the emptiest CPU node and won on node order.
            total -= self._avoid(cand)
        if gang is not None and gang.scores:
            total += INTER_POD_WEIGHT * gang.anti_affinity_score(cand, gang_nodes)
            total += SPREAD_WEIGHT * gang.spread_score(cand, gang_nodes)
        if (remaining > 1 or gang_nodes) and (gang is None or not gang.dynamic):
            # Keeping a gang together, unless its own rules spread it.
            total += TOPOLOGY_WEIGHT * self.topology(shape, cand, gang_nodes, remaining, node_cap)
        if shape.gpus > 1:
            if trail is None:
                contiguous = fit.contiguous(self.cluster, shape.gpus, cand)
            else:
                contiguous = trail.contiguous = (
                    without(trail.contiguous, trail.position)
                    if trail.following and trail.contiguous is not None
                    else fit.contiguous(self.cluster, shape.gpus, cand)
                )
            total += CONTIGUOUS_WEIGHT * contiguous
        return total

    def _trail_raw(self, workload: Workload, shape: Shape, cand: np.ndarray, trail: Trail) -> np.ndarray:
        """The single scorer's raw scores of ``cand``: the trail's without its chosen node when it is
        following and the scorer's scores depend only on each node's own state, else computed; kept in
        the trail when they may be reused."""
        if trail.following and trail.raw is not None:
            raw = without(trail.raw, trail.position)
        else:
            plugin = self.plugins[0]
            ctx = ScoreContext(self.cluster, shape, cand, workload.id, self.policy.seed)
            raw = np.asarray(plugin.score(ctx), dtype=np.float64)
            follows = getattr(plugin, "follows_nodes", None)
            if follows is None or not follows(shape):
                trail.raw = None
                return raw
        trail.raw = raw
        return raw

    def preferred_terms(self, workload: Workload) -> tuple[PreferredTerm, ...]:
        """The job's preferred node affinity terms: its preferred labels' (built once per cycle and
        labels: a gang's every replica asks), then its rules'."""
        terms: tuple[PreferredTerm, ...] = ()
        if workload.preferred_labels:
            terms = self._preferred.get(workload.preferred_labels) or ()
            if not terms:
                terms = self._preferred[workload.preferred_labels] = preferred_terms_of(workload.preferred_labels)
        if workload.rules is not None:
            terms += workload.rules.preferred_terms
        return terms

    def policy_votes(self, workload: Workload, shape: Shape, cand: np.ndarray) -> np.ndarray:
        """Each node's pool scorer's score, scaled to [0, 1] per scorer over its candidates."""
        if len(self.scorer_names) == 1:
            ctx = ScoreContext(self.cluster, shape, cand, workload.id, self.policy.seed)
            return _unit(np.asarray(self.plugins[0].score(ctx), dtype=np.float64))
        total = np.zeros(len(cand), dtype=np.float64)
        scorer_of = self.pool_scorer[cand]
        for s in range(len(self.scorer_names)):
            part = cand[scorer_of == s]
            if len(part) == 0:
                continue
            ctx = ScoreContext(self.cluster, shape, part, workload.id, self.policy.seed)
            total[scorer_of == s] += _unit(np.asarray(self.plugins[s].score(ctx), dtype=np.float64))
        return total

    def topology(
        self,
        shape: Shape,
        cand: np.ndarray,
        gang_nodes: Sequence[int],
        remaining: int,
        node_cap: np.ndarray | None = None,
    ) -> np.ndarray:
        """Keep a gang together, in tiers: same node 1, same rack 0.6, same zone 0.3 as replicas already
        placed. For the first replica: a node, else a rack, else a zone that can hold the whole gang, and
        within a tier the tightest such domain (keeps big free blocks for big gangs)."""
        if gang_nodes:
            return self._gang_tiers(gang_nodes)[cand]
        score = np.zeros(len(cand), dtype=np.float64)
        # Infeasible nodes hold no replica, so the candidates' capacities are the domains' capacities.
        if node_cap is None:
            node_cap = fit.replica_capacity(self.cluster, shape, cand)
        for weight, shifted, size in self._domain_levels:
            # Domain 0 gathers the nodes without the label: they share no domain, so it holds nothing
            # (``remaining`` is at least 1).
            cand_codes = shifted[cand]
            domain_cap = np.bincount(cand_codes, weights=node_cap, minlength=size)
            domain_cap[0] = 0
            cap_here = domain_cap[cand_codes]
            tight = remaining / np.maximum(cap_here, 1)
            score = np.where(cap_here >= remaining, weight + 0.1 * tight, score)
        holds = node_cap >= remaining
        return np.where(holds, 1.0 + 0.1 * remaining / np.maximum(node_cap, 1), score)

    def _gang_tiers(self, gang_nodes: Sequence[int]) -> np.ndarray:
        """:class:`_GangTiers` of ``gang_nodes`` (the list of the gang being placed), brought up to date
        with the nodes added since it was last read."""
        tiers = self._tiers
        if tiers is None or tiers.nodes is not gang_nodes or tiers.counted > len(gang_nodes):
            tiers = self._tiers = _GangTiers(gang_nodes, self.cluster.n)
        per_node = tiers.per_node
        for i in gang_nodes[tiers.counted :]:
            # Nodes without the label (code -1) share no domain.
            for tier, weight, members, code in (
                (0, 0.3, self._zone_members, self._zone_of[i]),
                (1, 0.6, self._rack_members, self.rack_of[i]),
            ):
                if code >= 0 and (tier, code) not in tiers.domains:
                    tiers.domains.add((tier, code))
                    nodes = members[code]
                    per_node[nodes] = np.maximum(per_node[nodes], weight)
            per_node[i] = 1.0
        tiers.counted = len(gang_nodes)
        return per_node


class _GangTiers:
    """Per node, the topology tier of a gang's replicas placed so far: 1 on their nodes, else 0.6 in
    their racks, else 0.3 in their zones, else 0 (each node's highest tier). Kept for the gang being
    placed: its list of nodes only grows, so each new node adds its own domains (a few scatters of
    the domains' static members cost less than a comparison per candidate and domain)."""

    __slots__ = ("counted", "domains", "nodes", "per_node")

    def __init__(self, nodes: Sequence[int], n: int) -> None:
        self.nodes = nodes  # the gang's list (kept alive, so no other list takes its id)
        self.counted = 0  # how many of its nodes are in ``per_node``
        self.domains: set[tuple[int, int]] = set()  # (tier, code) scattered already
        self.per_node = np.zeros(n, dtype=np.float64)


def without(array: np.ndarray, position: int) -> np.ndarray:
    """``np.delete(array, position)`` of a 1-D array (a new array), without its argument handling
    (a gang's next replica drops its predecessor's node this way three times)."""
    return np.concatenate((array[:position], array[position + 1 :]))


def _members(codes: np.ndarray, top: int) -> list[np.ndarray]:
    """Per code ``0..top``, the indices where ``codes`` has it."""
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(top + 2))
    return [order[bounds[c] : bounds[c + 1]] for c in range(top + 1)]


def _unit(raw: np.ndarray) -> np.ndarray:
    """Scale scores to [0, 1] over the candidates (all equal -> all zero)."""
    if len(raw) == 0:
        return raw
    low = np.minimum.reduce(raw)  # ``raw.min()`` without numpy's Python-level wrapper
    span = np.maximum.reduce(raw) - low
    if span <= 0 or not math.isfinite(span):
        return np.zeros_like(raw)
    scaled = raw - low
    scaled /= span  # in place: the same floats as ``(raw - low) / span``, one array fewer
    return scaled
