"""Rules between a job's own replicas, by Kubernetes' semantics, for one gang placement attempt.

The replicas placed so far (``gang``: their node indices, one entry per replica) decide where the next
may go. Topology domains are the values of a node label; ``kubernetes.io/hostname`` is each node
(its name when the label is missing).

1. **One domain** (``PlacementRules.required_topology``): every replica in the domain the gang was
   given (``domain``; ``placement.Placer`` tries the domains that can hold the gang, see there).
2. **Required pod anti-affinity** (InterPodAffinity's filter): no node in a domain that already holds
   a replica. A node without the label is in no domain and always passes.
3. **Topology spread, DoNotSchedule** (PodTopologySpread's filter), per constraint:
   - the node must have the label of every DoNotSchedule constraint (a static filter, ``filters``);
   - domains are the values of that label among the *eligible* nodes: those that could take the
     replica by its GPU model and MIG mode, that match its node selector and required affinity
     (``nodeAffinityPolicy: Honor``, the default), that are untainted for it and not cordoned only
     with ``nodeTaintsPolicy: Honor`` (the default ``Ignore`` counts them), and that carry every
     DoNotSchedule label; replicas count in their domain when their node is eligible;
   - the global minimum is the fewest replicas in any domain, or 0 when there are fewer domains
     than ``minDomains``;
   - a node passes when ``count(its domain) + 1 − minimum ≤ maxSkew``.
4. **Scores** (kube-scheduler's normalisations, see ``votes.Votes.score`` for their weights):
   - preferred anti-affinity: minus each term's weight per replica already in the node's domain,
     scaled min-max over the candidates;
   - topology spread, ScheduleAnyway: per constraint ``count · log(domains + 2) + maxSkew − 1``
     summed and rounded, then ``(max + min − score) / max`` over the candidates; a node without
     every ScheduleAnyway label scores 0.

A job's replicas are placed one at a time, like pods, so each is checked against the ones before it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .filters import ANTI_AFFINITY, FIT, OUTSIDE_DOMAIN, SPREAD, StaticFilters
from .fit import Shape
from .model import SpreadConstraint, Workload


class GangRules:
    """The dynamic rules of one gang attempt of ``workload`` as ``shape``."""

    def __init__(self, filters: StaticFilters, workload: Workload, shape: Shape) -> None:
        rules = workload.rules
        assert rules is not None
        index = filters.index
        self.n = filters.cluster.n
        self.domain: np.ndarray | None = None  # bool over nodes: the one domain the gang was given
        self.domain_name = ""
        self.required_anti = [index.domains(t.topology_key)[0] for t in rules.anti_affinity if t.weight == 0]
        self.preferred_anti = [(index.domains(t.topology_key)[0], t.weight) for t in rules.anti_affinity if t.weight]
        self.anti_keys = sorted({t.topology_key for t in rules.anti_affinity if t.weight == 0})
        hard = [c for c in rules.spread if c.when_unsatisfiable == "DoNotSchedule"]
        soft = [c for c in rules.spread if c.when_unsatisfiable != "DoNotSchedule"]
        self.spread_keys = sorted({c.topology_key for c in hard})
        self.dynamic = rules.dynamic
        masks = filters.masks(workload, shape) if rules.spread else None
        self.hard = self._constraints(filters, hard, masks)
        self.soft = self._constraints(filters, soft, masks)
        self.soft_keys_ok = self._all_keys(filters, soft)

    def _all_keys(self, filters: StaticFilters, constraints: list[SpreadConstraint]) -> np.ndarray:
        ok = np.ones(self.n, dtype=bool)
        for c in constraints:
            ok &= filters.index.domains(c.topology_key)[0] >= 0
        return ok

    def _constraints(
        self,
        filters: StaticFilters,
        constraints: list[SpreadConstraint],
        masks: tuple[np.ndarray, np.ndarray, np.ndarray] | None,
    ) -> list[tuple[SpreadConstraint, np.ndarray, np.ndarray, np.ndarray]]:
        """Per constraint: (itself, domain codes, eligible nodes, which domains exist among them)."""
        if not constraints or masks is None:
            return []
        shape_ok, affinity_ok, taints_ok = masks
        keys_ok = self._all_keys(filters, constraints)
        out = []
        for c in constraints:
            codes, table = filters.index.domains(c.topology_key)
            eligible = shape_ok & keys_ok
            if c.node_affinity_policy != "Ignore":
                eligible = eligible & affinity_ok
            if c.node_taints_policy == "Honor":
                eligible = eligible & taints_ok
            present = np.zeros(max(len(table), 1), dtype=bool)
            present[codes[eligible]] = True
            out.append((c, codes, eligible, present))
        return out

    # -- filters ------------------------------------------------------------------------------------

    def allowed(self, cand: np.ndarray, gang: Sequence[int]) -> np.ndarray:
        """Which of the candidate nodes ``cand`` the next replica may take, given the replicas on
        ``gang``."""
        return self.codes(cand, gang) == FIT

    def codes(self, nodes: np.ndarray, gang: Sequence[int]) -> np.ndarray:
        """Per node of ``nodes``: ``FIT`` or the first rule that rejects it (domain, anti-affinity,
        spread)."""
        codes = np.zeros(len(nodes), dtype=np.int8)
        used = np.asarray(gang, dtype=np.int64)
        for c, domains, eligible, present in self.hard:
            counts = self._counts(domains, eligible, used)
            low = 0 if int(present.sum()) < c.min_domains or not present.any() else int(counts[present].min())
            node_domains = domains[nodes]  # every candidate carries the label (a static filter)
            ok = (node_domains >= 0) & (counts[np.maximum(node_domains, 0)] + 1 - low <= c.max_skew)
            codes[~ok] = SPREAD
        for domains in self.required_anti:
            if len(used):
                taken = np.zeros(int(domains.max(initial=-1)) + 2, dtype=bool)
                taken[domains[used] + 1] = True
                taken[0] = False  # no label: no domain
                codes[taken[domains[nodes] + 1]] = ANTI_AFFINITY
        if self.domain is not None:
            codes[~self.domain[nodes]] = OUTSIDE_DOMAIN
        return codes

    @staticmethod
    def _counts(domains: np.ndarray, eligible: np.ndarray, used: np.ndarray) -> np.ndarray:
        """Replicas per domain, counting those on eligible nodes."""
        size = int(domains.max(initial=-1)) + 1
        if not len(used):
            return np.zeros(max(size, 1), dtype=np.int64)
        counted = used[eligible[used] & (domains[used] >= 0)]
        return np.bincount(domains[counted], minlength=max(size, 1)).astype(np.int64)

    # -- scores -------------------------------------------------------------------------------------

    @property
    def scores(self) -> bool:
        return bool(self.preferred_anti or self.soft)

    def anti_affinity_score(self, cand: np.ndarray, gang: Sequence[int]) -> np.ndarray:
        """Preferred anti-affinity, min-max scaled (InterPodAffinity); zeros without such terms."""
        raw = np.zeros(len(cand), dtype=np.float64)
        used = np.asarray(gang, dtype=np.int64)
        if not self.preferred_anti or not len(used):
            return raw
        for domains, weight in self.preferred_anti:
            on = used[domains[used] >= 0]
            counts = np.bincount(domains[on], minlength=int(domains.max(initial=-1)) + 1)
            node_domains = domains[cand]
            has = node_domains >= 0
            raw[has] -= weight * counts[node_domains[has]]
        low, span = raw.min(), raw.max() - raw.min()
        return (raw - low) / span if span > 0 else np.zeros_like(raw)

    def spread_score(self, cand: np.ndarray, gang: Sequence[int]) -> np.ndarray:
        """ScheduleAnyway spread (PodTopologySpread's score), in [0, 1]; zeros without such
        constraints."""
        if not self.soft:
            return np.zeros(len(cand), dtype=np.float64)
        used = np.asarray(gang, dtype=np.int64)
        scored = self.soft_keys_ok[cand]
        raw = np.zeros(len(cand), dtype=np.float64)
        for c, domains, eligible, _ in self.soft:
            counts = self._counts(domains, eligible, used)
            node_domains = domains[cand]
            if c.topology_key == "kubernetes.io/hostname":
                size = int(scored.sum())
            else:  # distinct domains among the scored candidates
                size = int(np.count_nonzero(np.bincount(node_domains[scored], minlength=1)))
            weight = math.log(size + 2)
            raw += counts[np.maximum(node_domains, 0)] * weight + (c.max_skew - 1)
        raw = np.round(raw)
        out = np.zeros(len(cand), dtype=np.float64)
        if not scored.any():
            return out
        top, low = raw[scored].max(), raw[scored].min()
        out[scored] = 1.0 if top == 0 else (top + low - raw[scored]) / top
        return out
