"""Placement: which node and which devices each replica of a job takes.

For one replica of a shape (see ``fit.Shape``):

1. Static filters, cached per (model, kind, selector, tolerations): GPU model, MIG mode, required
   node selector, taints (NoSchedule/NoExecute must be tolerated), cordon (``filters``).
2. The fit rule, vectorised over the remaining nodes (``fit``): enough fully free devices (whole
   GPUs), a device with enough free share (fractions), a MIG slice at a valid start (MIG), CPU and
   memory.
3. Score the feasible nodes (``votes``): the placement scorer chosen for the node's pool, plus
   preferred-affinity weights, plus topology (for multi-replica jobs: the same node, rack, zone as
   replicas already placed; for the first replica, the tightest node, rack or zone that can hold the
   whole gang; for multi-GPU replicas, a node with a contiguous block of free devices). Highest wins;
   ties go to the node first in node order (GPU model, then name). A gang's next replica first tries
   the node the previous one went to.
4. Pick devices inside the node (the scorer's device picker, or the default packing one).

Scorers are plugins (``scorers.PLUGINS``; the FGD paper's policies are in ``frag.plugins``). When only
the placement policy votes on a single replica, step 3 is a masked argmax over the GPU model's block
of nodes (``votes.Votes.fast_pick`` for binpack and spread, ``Votes.block_pick`` for fgd and portal);
``test_the_fast_path_picks_the_node_the_scored_path_picks`` keeps them equal to the scored path.

A gang places replica by replica in a ``Statement``; the caller commits or discards it. A replica
first tries the node the previous one went to; while the replicas so far share one rack with room,
only that rack's nodes are candidates. Otherwise, once the node the previous scored replica chose is
full, the next replica's candidates, raw policy scores and contiguity votes are that replica's without
the full node (``votes.Trail``: nothing else changed in between), not measured again. When a replica
does not fit, :meth:`Placer.explain` counts, for every node, the first filter that rejected it.

A job with placement rules (``Workload.rules``) takes :meth:`Placer._place_ruled`: the same steps
with the rules between its replicas (``replicas.GangRules``: anti-affinity, topology spread) applied
to each replica's candidates, no same-node fill or same-rack shortcut when those rules spread it, and,
for a gang that must stay in one domain, the domains tried one after another (the one that holds the
most of its replicas first, then the tightest; at most ``MAX_DOMAIN_TRIALS``). Jobs without rules
never reach that code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from . import fit
from .capacity import FULL, Cluster, Statement
from .explain import NO_EXPLANATION, Explanation, shortage
from .filters import (
    ANTI_AFFINITY,
    CORDONED,
    CPU,
    FIT,
    GPUS,
    MEMORY,
    MODEL,
    OUTSIDE_DOMAIN,
    REASONS,
    SPREAD,
    StaticFilters,
    rule_words,
    topology_levels,
)
from .fit import Shape
from .model import Policy, ReplicaPlacement, Workload
from .replicas import GangRules
from .scorers import PluginSetup, pick_devices
from .votes import Trail, Votes, without

# A gang that must stay in one domain tries at most this many domains per attempt (bounded work).
MAX_DOMAIN_TRIALS = 32

# ``fit.misfit``'s outcome as explanation codes.
_MISFIT_CODES = np.array([FIT, GPUS, CPU, MEMORY], dtype=np.int8)


@dataclass(frozen=True, slots=True)
class GangResult:
    placements: tuple[ReplicaPlacement, ...]
    explanation: Explanation | None  # on failure
    fit_count: int = 0  # on failure: how many replicas would have fitted
    within: str = ""  # on failure of a one-domain gang: "one rack (topology.kubernetes.io/rack)"


class Placer:
    """Placement over one :class:`Cluster` for one cycle, with its filter caches."""

    def __init__(
        self,
        cluster: Cluster,
        policy: Policy,
        mig_profiles: dict[str, tuple[str, ...]] | None = None,
        typical: tuple[tuple[int, int, int, tuple[str, ...]], ...] = (),
        *,
        fast_path: bool = True,
    ) -> None:
        """Build before any usage is applied to ``cluster``: stateful scorers mirror every change.

        ``fast_path=False`` always takes the scored path (the fast paths' property test compares them).
        """
        self.cluster = cluster
        self.policy = policy
        self.mig_profiles = mig_profiles or {}
        self.filters = StaticFilters(cluster, topology_levels(policy))
        self._shapes: dict[tuple[object, ...], Shape | str] = {}
        self._gangs: dict[tuple[object, ...], GangRules] = {}
        self._all = np.arange(cluster.n)
        self.votes = Votes(policy, self.filters, PluginSetup(cluster, policy.seed, typical), fast_path)
        self.rack = self.votes.rack
        self.plugins = self.votes.plugins
        self.scorer_names = self.votes.scorer_names
        self._rack_members = {int(code): np.flatnonzero(self.rack == code) for code in np.unique(self.rack)}
        self._rack_block: dict[tuple[int, int, int], np.ndarray] = {}  # see :meth:`_same_rack`

    # -- shapes -----------------------------------------------------------------------------------

    def shape_for(self, workload: Workload, model: str | None) -> Shape | str:
        """The replica shape on GPU ``model``, or why the request cannot exist on that model."""
        key = (workload.resources, model)
        shape = self._shapes.get(key)
        if shape is None:
            shape = self._shapes[key] = fit.shape_of(self.cluster, self.mig_profiles, workload.resources, model)
        return shape

    # -- filters and fit --------------------------------------------------------------------------

    def eligible(self, workload: Workload, shape: Shape) -> np.ndarray:
        """Node indices that pass every static filter (cached per shape-relevant key)."""
        return self.filters.eligible(workload, shape)[1]

    def feasible(self, shape: Shape, idx: np.ndarray) -> np.ndarray:
        """The nodes of ``idx`` where one more replica fits now."""
        return idx[fit.fits(self.cluster, shape, idx)]

    def _feasible_in(self, shape: Shape, mask: np.ndarray, lo: int) -> np.ndarray:
        """Feasible nodes among the model's block ``lo:lo+len(mask)`` where ``mask`` (the static
        filters) holds: the fit rule on array views, no gathering."""
        return fit.fits(self.cluster, shape, slice(lo, lo + len(mask)), within=mask).nonzero()[0] + lo

    # -- placing ----------------------------------------------------------------------------------

    def choose_node(
        self,
        workload: Workload,
        shape: Shape,
        gang_nodes: Sequence[int] = (),
        remaining: int = 1,
        node: int | None = None,
        gang: GangRules | None = None,
        first: tuple[np.ndarray, np.ndarray] | None = None,
        trail: Trail | None = None,
    ) -> int | None:
        """The node one more replica goes to, or ``None``; nothing is placed. With ``node``, only that
        node is tried (it must already pass the static filters). ``gang``: the job's rules between
        its replicas (jobs with placement rules only). ``first``: for a gang's first replica (no rules,
        not MIG), the feasible nodes and their replica capacity as :meth:`place_gang` just measured
        them, so they are not measured again. ``trail``: the gang's previous scored replica
        (``votes.Trail``), read and written."""
        node_cap = None
        whole = False  # the candidates are the model's whole block (the fit rule on every node of it)
        if node is not None:
            if gang is None:  # the scalar form of the same rule
                return node if fit.fits_node(self.cluster, shape, node) else None
            cand = self.feasible(shape, np.array([node]))
        elif first is not None:
            cand, node_cap = first
        else:
            mask, eligible, lo = self.filters.eligible(workload, shape)
            votes = self.votes
            if gang is None and shape.kind != "mig" and votes.single_vote(workload, gang_nodes, remaining):
                if votes.fast:
                    return votes.fast_pick(shape, mask, lo)
                if votes.block is not None:
                    picked = votes.block_pick(votes.block, shape, mask, lo)
                    if picked is not False:
                        return picked
            if len(eligible) == 0:
                return None
            if trail is not None and trail.follows(gang_nodes):
                # Only the node the previous scored replica chose changed since, and it is full now.
                assert trail.cand is not None
                cand, whole = without(trail.cand, trail.position), True
                trail.following = True
            else:
                if trail is not None:
                    trail.following = False
                in_rack = None if gang is not None else self._same_rack(shape, mask, lo, gang_nodes)
                if in_rack is not None:
                    cand = in_rack
                elif shape.kind == "mig":  # few MIG nodes: test them, not the model's whole block
                    cand = self.feasible(shape, eligible)
                else:
                    cand, whole = self._feasible_in(shape, mask, lo), True
        if gang is not None and len(cand):
            cand = cand[gang.allowed(cand, gang_nodes)]
        record = trail if trail is not None and whole and gang_nodes and len(cand) > 1 else None
        if trail is not None and record is None:
            trail.cand = None  # the next replica cannot follow this one
        if len(cand) == 0:
            return None
        if len(cand) == 1:
            return int(cand[0])
        scores = self.votes.score(workload, shape, cand, gang_nodes, remaining, gang, node_cap, record)
        best = int(scores.argmax())
        if record is not None:
            record.cand, record.position, record.chosen, record.placed = cand, best, int(cand[best]), len(gang_nodes)
        return int(cand[best])

    def place_one(
        self,
        workload: Workload,
        shape: Shape,
        stmt: Statement,
        gang_nodes: Sequence[int],
        remaining: int,
        node: int | None = None,
        gang: GangRules | None = None,
        first: tuple[np.ndarray, np.ndarray] | None = None,
        trail: Trail | None = None,
    ) -> ReplicaPlacement | None:
        """Place one replica (on ``node`` only, when given: it must already be eligible; ``first`` and
        ``trail``: see :meth:`choose_node`)."""
        best = self.choose_node(workload, shape, gang_nodes, remaining, node, gang, first, trail)
        if best is None:
            return None
        plugin = self.plugins[int(self.votes.pool_scorer[best])]
        picked = plugin.pick(self.cluster, best, shape, workload.id)
        devices, slot = picked if picked is not None else pick_devices(self.cluster, best, shape)
        if shape.kind != "cpu" and not devices:
            return None  # cannot happen when the fit rule agrees with the picker
        mig = shape.mig
        placement = ReplicaPlacement(  # positional (a hot path): node, devices, milli, profile, slot, CPU, memory
            self.cluster.nodes[best].name,
            devices,
            0 if mig is not None else (FULL if shape.gpus else shape.milli),
            mig.profile if mig is not None else None,
            slot,
            shape.cpu_milli,
            shape.memory_mib,
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
        if workload.rules is not None:
            return self._place_ruled(workload, shape, stmt, wanted, needed, explain)
        if wanted == 1:  # one replica (most jobs): ``_place_replicas``'s one step
            placement = self.place_one(workload, shape, stmt, (), 1)
            if placement is not None:
                return GangResult((placement,), None)
            if needed > 0:  # the same step again would miss again: explain the miss
                return GangResult((), self.explain(workload, [shape]) if explain else NO_EXPLANATION, 0)
        first = None
        if needed > 1 and shape.kind != "mig":
            # Replicas are identical and each takes exactly one unit of a node's replica capacity,
            # so the summed capacity is exactly how many fit: fail before placing any.
            mask, _, lo = self.filters.eligible(workload, shape)
            feasible = self._feasible_in(shape, mask, lo)  # on the model's block: no gathering
            node_cap = fit.replica_capacity(self.cluster, shape, feasible)
            capacity = int(node_cap.sum())
            if capacity < needed:
                explanation = self._explain_after(workload, shape, capacity) if explain else NO_EXPLANATION
                return GangResult((), explanation, capacity)
            first = (feasible, node_cap)  # what the first replica's choice measures again
        placements, _ = self._place_replicas(workload, shape, stmt, wanted, first=first)
        if len(placements) >= needed:
            return GangResult(tuple(placements), None)
        explanation = self.explain(workload, [shape]) if explain else NO_EXPLANATION
        stmt.discard()
        return GangResult((), explanation, len(placements))

    def _place_replicas(
        self,
        workload: Workload,
        shape: Shape,
        stmt: Statement,
        wanted: int,
        gang: GangRules | None = None,
        first: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> tuple[list[ReplicaPlacement], list[int]]:
        """Place replicas one by one until ``wanted`` or one does not fit; (placements, their nodes).
        ``first``: see :meth:`choose_node`."""
        placements: list[ReplicaPlacement] = []
        gang_nodes: list[int] = []
        last: int | None = None
        fill = gang is None or not gang.dynamic
        # A gang without rules scores each next replica from the previous one's arrays (``votes.Trail``).
        trail = self.votes.trail() if gang is None and shape.kind != "mig" and wanted > 1 else None
        while len(placements) < wanted:
            # Fill the node the previous replica went to before scoring again: replicas of a gang
            # on one node talk over NVLink/shared memory, and it saves a scoring pass per replica.
            # Not when the job's own rules spread its replicas.
            placement = None
            remaining = wanted - len(placements)
            if fill and last is not None and fit.fits_node(self.cluster, shape, last):
                placement = self.place_one(workload, shape, stmt, gang_nodes, remaining, last, gang)
            if placement is None:
                placement = self.place_one(workload, shape, stmt, gang_nodes, remaining, None, gang, first, trail)
            first = None
            if placement is None:
                break
            placements.append(placement)
            last = self.cluster.index[placement.node]
            gang_nodes.append(last)
        return placements, gang_nodes

    def _place_ruled(
        self, workload: Workload, shape: Shape, stmt: Statement, wanted: int, needed: int, explain: bool
    ) -> GangResult:
        """:meth:`place_gang` for a job with placement rules (see the module's docstring)."""
        rules = workload.rules
        assert rules is not None
        if not len(self.eligible(workload, shape)):  # the static filters left nothing: no rule to apply
            return GangResult(
                (), self.explain(workload, [shape]) if explain else NO_EXPLANATION, 0, self._within(workload)
            )
        gang = self._gang_rules(workload, shape)
        if not rules.required_topology:
            placements, gang_nodes = self._place_replicas(workload, shape, stmt, wanted, gang)
            if len(placements) >= needed:
                return GangResult(tuple(placements), None)
            explanation = self.explain(workload, [shape], gang, gang_nodes) if explain else NO_EXPLANATION
            stmt.discard()
            return GangResult((), explanation, len(placements))
        key = self.filters.topology_key(rules.required_topology)
        codes, table = self.filters.index.domains(key)
        within = self._within(workload)
        domains, largest = self._domains_to_try(workload, shape, codes, wanted, needed)
        best_count, best_domain = 0, largest
        for domain in domains:
            gang.domain = codes == domain
            placements, _ = self._place_replicas(workload, shape, stmt, wanted, gang)
            if len(placements) >= needed:
                return GangResult(tuple(placements), None)
            stmt.discard()
            if len(placements) > best_count:
                best_count, best_domain = len(placements), domain
        if not explain:
            return GangResult((), NO_EXPLANATION, best_count, within)
        # Explain the next replica in the domain that took the most, or that has the most room when
        # none was worth a try (over every node when no domain has room for one replica).
        gang.domain = codes == best_domain if best_domain >= 0 else None
        gang.domain_name = table[best_domain] if best_domain >= 0 else ""
        count = best_count if domains else wanted
        placements, gang_nodes = self._place_replicas(workload, shape, stmt, count, gang)
        best_count = len(placements)
        explanation = self.explain(workload, [shape], gang, gang_nodes)
        stmt.discard()
        return GangResult((), explanation, best_count, within)

    def _gang_rules(self, workload: Workload, shape: Shape) -> GangRules:
        """The job's rules between replicas for ``shape``, built once per cycle and rules (their masks
        do not change during a cycle), with no domain given yet."""
        key = (shape, workload.node_selector, workload.tolerations, workload.rules)
        gang = self._gangs.get(key)
        if gang is None:
            gang = self._gangs[key] = GangRules(self.filters, workload, shape)
        gang.domain, gang.domain_name = None, ""
        return gang

    def _within(self, workload: Workload) -> str:
        """Where a one-domain gang must be, in words: ``one rack (topology.kubernetes.io/rack)``."""
        level = workload.rules.required_topology if workload.rules is not None else ""
        if not level:
            return ""
        key = self.filters.topology_key(level)
        return f"one {level}" + (f" ({key})" if key != level else "")

    def _domains_to_try(
        self, workload: Workload, shape: Shape, codes: np.ndarray, wanted: int, needed: int
    ) -> tuple[list[int], int]:
        """The domains that may hold ``needed`` replicas now, the one that holds the most (up to
        ``wanted``) first, then the tightest, then by name; at most ``MAX_DOMAIN_TRIALS``. And the
        domain with the most room (-1 when none has room for one replica)."""
        feasible = self.feasible(shape, self.eligible(workload, shape))
        domains = codes[feasible]
        if shape.kind == "mig":  # replica capacity counts one MIG slice per node at most: no bound
            capacity = np.bincount(domains[domains >= 0], minlength=int(codes.max(initial=-1)) + 1) * wanted
        else:
            node_cap = fit.replica_capacity(self.cluster, shape, feasible)
            inside = domains >= 0
            capacity = np.bincount(domains[inside], weights=node_cap[inside], minlength=int(codes.max(initial=-1)) + 1)
        order = sorted(
            (int(d) for d in np.flatnonzero(capacity >= needed)),
            key=lambda d: (-min(int(capacity[d]), wanted), int(capacity[d]), d),
        )
        largest = int(np.argmax(capacity)) if len(capacity) and capacity.max() > 0 else -1
        return order[:MAX_DOMAIN_TRIALS], largest

    def can_place(self, workload: Workload, shape: Shape, needed: int) -> bool:
        """Whether ``needed`` replicas fit now, without placing them (exact; MIG and jobs with
        placement rules by a trial)."""
        if shape.kind == "mig" or workload.rules is not None:
            trial = Statement(self.cluster)
            ok = self.place_gang(workload, shape, trial, needed, needed, explain=False).explanation is None
            trial.discard()
            return ok
        mask, eligible, lo = self.filters.eligible(workload, shape)
        if len(eligible) == 0:
            return False
        cand = self._feasible_in(shape, mask, lo)
        if needed <= 1 or len(cand) >= needed:
            return len(cand) >= needed
        return int(fit.replica_capacity(self.cluster, shape, cand).sum()) >= needed

    def _same_rack(self, shape: Shape, mask: np.ndarray, lo: int, gang_nodes: Sequence[int]) -> np.ndarray | None:
        """Feasible nodes in the rack of the gang's replicas so far, when they share one rack and it
        still has room; ``None`` otherwise (then every node is a candidate). Keeps a gang in the fewest
        racks and scores a few dozen nodes instead of thousands."""
        if not gang_nodes:
            return None
        rack_of = self.votes.rack_of
        rack = rack_of[gang_nodes[0]]
        if rack < 0 or any(rack_of[i] != rack for i in gang_nodes):
            return None
        block = (rack, lo, len(mask))
        members = self._rack_block.get(block)
        if members is None:  # the rack's nodes in the model's block, as offsets into it (static)
            members = self._rack_members[rack]
            members = self._rack_block[block] = members[(members >= lo) & (members < lo + len(mask))] - lo
        members = members[mask[members]] + lo
        cand = self.feasible(shape, members)
        return cand if len(cand) else None

    # -- explaining -------------------------------------------------------------------------------

    def _explain_after(self, workload: Workload, shape: Shape, count: int) -> Explanation:
        """Explain the replica after the first ``count``: place them, explain, undo."""
        trial = Statement(self.cluster)
        gang = self._gang_rules(workload, shape) if workload.rules is not None else None
        gang_nodes: list[int] = []
        for k in range(count):
            placement = self.place_one(workload, shape, trial, gang_nodes, count - k, None, gang)  # no fill
            if placement is None:
                break
            gang_nodes.append(self.cluster.index[placement.node])
        explanation = self.explain(workload, [shape], gang, gang_nodes)
        trial.discard()
        return explanation

    def explain(
        self, workload: Workload, shapes: list[Shape], gang: GangRules | None = None, gang_nodes: Sequence[int] = ()
    ) -> Explanation:
        """Count nodes by the first filter that rejects one more replica of any of ``shapes`` (after
        the replicas on ``gang_nodes``, under the job's rules between replicas ``gang``), and name the
        resource that is short where a node passes the static filters (``explain.shortage``)."""
        cluster = self.cluster
        codes = np.full(cluster.n, MODEL, dtype=np.int8)
        rules = gang
        per_shape = []
        for shape in shapes:
            if shape.gpu_model is None:
                nodes = self._all
            else:
                nodes = np.flatnonzero(cluster.node_model == cluster.model_code.get(shape.gpu_model, -2))
            static = self.filters.codes(workload, shape, nodes)
            node_codes = np.where(static != FIT, static, _MISFIT_CODES[fit.misfit(cluster, shape, nodes)])
            if gang is None and workload.rules is not None and (node_codes == FIT).any():
                rules = self._gang_rules(workload, shape)
            if rules is not None:
                node_codes = np.where(node_codes != FIT, node_codes, rules.codes(nodes, gang_nodes))
            codes[nodes] = node_codes
            per_shape.append((shape, nodes))
        codes[cluster.cordoned] = CORDONED
        counts = np.bincount(codes, minlength=len(REASONS))
        words = self._words(workload, shapes, rules)
        pairs = sorted(
            ((words[c], int(counts[c])) for c in range(1, len(REASONS)) if counts[c]),
            key=lambda p: (-p[1], p[0]),
        )
        shorts = [s for shape, nodes in per_shape if (s := shortage(cluster, shape, nodes, codes[nodes]))]
        short = max(shorts, key=lambda s: s.nodes, default=None)  # the first of equals
        return Explanation(int(counts[FIT]), tuple(pairs), short)

    def _words(self, workload: Workload, shapes: list[Shape], gang: GangRules | None) -> list[str]:
        """The explanation's words, naming the job's own numbers and rules."""
        words = list(REASONS)
        kinds = {shape.kind for shape in shapes}
        if kinds == {"fraction"}:
            words[GPUS] = f"no GPU with {shapes[0].milli / 1000:g} free"
        elif kinds == {"mig"} and shapes[0].mig is not None:
            words[GPUS] = f"no free MIG slice for {shapes[0].mig.profile}"
        models = sorted({shape.gpu_model for shape in shapes if shape.gpu_model})
        if models:
            words[MODEL] = f"GPU model not {' or '.join(models)}"
        rules = workload.rules
        if rules is None:
            return words
        for code, word in rule_words(workload, self.filters.levels).items():
            words[code] = word
        if gang is not None:
            if gang.anti_keys:
                keys = " / ".join(gang.anti_keys)
                words[ANTI_AFFINITY] = f"already hold a replica in their {keys} (pod anti-affinity)"
            if gang.spread_keys:
                keys = " / ".join(gang.spread_keys)
                words[SPREAD] = f"would exceed the topology spread's maxSkew over {keys}"
            if gang.domain_name:
                words[OUTSIDE_DOMAIN] = f"outside {rules.required_topology} {gang.domain_name}"
        return words
