"""Static placement filters, and the codes that explain why a node does not take a replica.

Static filters do not change during a cycle, so their result is a cached boolean mask per
(GPU model, kind, MIG geometry, node selector, required node affinity, one-domain level,
tolerations). In filter order (a node is counted under the first that rejects it):

1. cordoned (``unschedulable``);
2. GPU model not allowed (or not a GPU node);
3. MIG mode: whole GPUs and fractions need a non-MIG node, MIG profiles a MIG node;
4. MIG profile not supported on this node's device (same geometry, i.e. same device memory);
5. required node selector (each pair: the node has the label with that value);
6. required node affinity (``affinity``: Kubernetes' operators, terms OR-ed);
7. topology labels: a gang that must stay in one rack / zone / NVLink domain needs nodes that are in
   one (carry the label), and a DoNotSchedule spread constraint nodes that carry its label;
8. taints: every ``NoSchedule``/``NoExecute`` taint must be tolerated (``taints``).

Then the fit rule (``fit``): GPUs, CPU, memory; its outcome maps onto the next three codes. The last
codes are the rules that depend on where a job's other replicas went (``replicas``): pod
anti-affinity, topology spread, and the domain a one-domain gang was given.
"""

from __future__ import annotations

import numpy as np

from .affinity import HOSTNAME, LabelIndex, terms_text
from .capacity import Cluster
from .fit import Shape
from .model import Policy, Requirement, Toleration, Workload
from .taints import untolerated_hard, untolerated_soft

REASONS = (
    "fit",
    "cordoned",
    "GPU model not allowed",
    "MIG mode does not match",
    "MIG profile not supported",
    "node selector does not match",
    "node affinity does not match",
    "missing a topology label the job requires",
    "untolerated taint",
    "too few free GPUs",
    "not enough CPU",
    "not enough memory",
    "pod anti-affinity: a replica of the job is already in its domain",
    "topology spread: would exceed maxSkew",
    "outside the domain the gang was given",
)
(
    FIT,
    CORDONED,
    MODEL,
    MIG_MODE,
    MIG_PROFILE,
    SELECTOR,
    AFFINITY,
    NO_DOMAIN,
    TAINT,
    GPUS,
    CPU,
    MEMORY,
    ANTI_AFFINITY,
    SPREAD,
    OUTSIDE_DOMAIN,
) = range(len(REASONS))


def required_labels(workload: Workload, levels: dict[str, str]) -> tuple[str, ...]:
    """The topology labels a node must carry for the job: its one-domain level's and those of its
    DoNotSchedule spread constraints (``kubernetes.io/hostname`` is always there)."""
    rules = workload.rules
    if rules is None:
        return ()
    keys = {c.topology_key for c in rules.spread if c.when_unsatisfiable == "DoNotSchedule"}
    if rules.required_topology:
        keys.add(levels.get(rules.required_topology, rules.required_topology))
    return tuple(sorted(keys - {HOSTNAME}))


def rule_words(workload: Workload, levels: dict[str, str]) -> dict[int, str]:
    """The words of the static filters a job's placement rules add, naming its rules: ``not matching
    node affinity gpu-type In [A100, H100]``, ``without the label topology.kubernetes.io/rack``."""
    words = {}
    if workload.rules is not None and workload.rules.required_terms is not None:
        words[AFFINITY] = f"not matching node affinity {terms_text(workload.rules.required_terms)}"
    if labels := required_labels(workload, levels):
        words[NO_DOMAIN] = f"without the label {' / '.join(labels)}"
    return words


def topology_levels(policy: Policy) -> dict[str, str]:
    """The short names of a one-domain gang's level and the node label each stands for."""
    return {"node": HOSTNAME, "rack": policy.rack_label, "zone": policy.zone_label, "nvlink": policy.nvlink_label}


class StaticFilters:
    """The static filters over one :class:`Cluster`'s nodes, with their caches (one cycle)."""

    def __init__(self, cluster: Cluster, levels: dict[str, str] | None = None) -> None:
        self.cluster = cluster
        self.index = LabelIndex(cluster.nodes)
        self.labels = self.index.labels
        self.levels = levels or {}
        self._taint_groups: dict[tuple, list[int]] = {}
        for i, node in enumerate(cluster.nodes):
            self._taint_groups.setdefault(node.taints, []).append(i)
        self._tainted = np.array([bool(node.taints) for node in cluster.nodes], dtype=bool)
        self._tolerated_cache: dict[tuple[Toleration, ...], np.ndarray] = {}
        self._soft_cache: dict[tuple[Toleration, ...], np.ndarray] = {}
        self._selector_cache: dict[tuple[tuple[str, str], ...], np.ndarray] = {}
        self._eligible: dict[tuple[object, ...], tuple[np.ndarray, np.ndarray, int]] = {}
        self.soft_tainted = np.array(
            [any(t.effect == "PreferNoSchedule" for t in node.taints) for node in cluster.nodes], dtype=bool
        )
        self.any_soft_taint = bool(self.soft_tainted.any())

    def topology_key(self, level: str) -> str:
        """The node label of a one-domain level (``rack``, ``zone``, ...), or ``level`` itself."""
        return self.levels.get(level, level)

    def codes(self, workload: Workload, shape: Shape, nodes: np.ndarray, cordon: bool = True) -> np.ndarray:
        """First failing static filter per node in ``nodes`` (``FIT`` when all pass), vectorised.

        Codes are written from the last filter to the first, so the first failing one wins.
        ``cordon=False`` leaves the cordon out (the cluster as configured: a cordon is lifted again).
        """
        cluster = self.cluster
        codes = np.zeros(len(nodes), dtype=np.int8)
        if workload.node_selector:
            codes[~self.selected(workload.node_selector)[nodes]] = SELECTOR
        if shape.mig is not None:
            codes[~self._mig_supported(shape)[nodes]] = MIG_PROFILE
        if shape.kind != "cpu":
            codes[cluster.mig_node[nodes] != (shape.kind == "mig")] = MIG_MODE
        if shape.gpu_model is not None:
            code = cluster.model_code.get(shape.gpu_model, -2)
            codes[cluster.node_model[nodes] != code] = MODEL
        if cordon:
            codes[cluster.cordoned[nodes]] = CORDONED
        open_ = codes == FIT
        if not open_.any():
            return codes  # the later filters cannot change a node's first failing one
        late = np.zeros(len(nodes), dtype=np.int8)
        if workload.tolerations or self._tainted.any():
            late[~self.tolerated(workload.tolerations)[nodes]] = TAINT
        rules = workload.rules
        for key in required_labels(workload, self.levels):
            late[self.index.domains(key)[0][nodes] < 0] = NO_DOMAIN
        if rules is not None and rules.required_terms is not None:
            late[~self.index.required(rules.required_terms)[nodes]] = AFFINITY
        return np.where(open_, late, codes).astype(np.int8)

    def eligible(self, workload: Workload, shape: Shape) -> tuple[np.ndarray, np.ndarray, int]:
        """(boolean mask over the model's node slice, node indices, slice start) of the nodes passing
        every static filter. A GPU model's nodes are one contiguous slice (see ``Cluster``)."""
        rules = workload.rules
        key = (
            shape.gpu_model,
            shape.kind,
            shape.mig,
            workload.node_selector,
            workload.tolerations,
            rules,  # its hash is cached (``PlacementRules``); a tuple of its terms would be hashed deep each time
        )
        cached = self._eligible.get(key)
        if cached is None:
            if shape.gpu_model is None:
                lo, hi = 0, self.cluster.n
            else:
                lo, hi = self.cluster.model_slice.get(shape.gpu_model, (0, 0))
            pool = np.arange(lo, hi)
            passed = self.codes(workload, shape, pool) == FIT
            cached = (passed, pool[passed], lo)
            self._eligible[key] = cached
        return cached

    def tolerated(self, tolerations: tuple[Toleration, ...]) -> np.ndarray:
        """Nodes whose NoSchedule/NoExecute taints are all tolerated (one check per distinct taint set)."""
        mask = self._tolerated_cache.get(tolerations)
        if mask is None:
            mask = np.ones(self.cluster.n, dtype=bool)
            for taints, members in self._taint_groups.items():
                if untolerated_hard(tolerations, taints):
                    mask[members] = False
            self._tolerated_cache[tolerations] = mask
        return mask

    def selected(self, selector: tuple[tuple[str, str], ...]) -> np.ndarray:
        """Nodes that have every label of ``selector`` with its value (Kubernetes' nodeSelector)."""
        mask = self._selector_cache.get(selector)
        if mask is None:
            mask = np.ones(self.cluster.n, dtype=bool)
            for key, value in selector:
                mask = mask & self.index.requirement(Requirement(key, "In", (value,)))
            self._selector_cache[selector] = mask
        return mask

    def soft_taints_untolerated(self, tolerations: tuple[Toleration, ...]) -> np.ndarray:
        """Per node, how many of its ``PreferNoSchedule`` taints ``tolerations`` do not tolerate."""
        counts = self._soft_cache.get(tolerations)
        if counts is None:
            counts = np.zeros(self.cluster.n, dtype=np.float64)
            for taints, members in self._taint_groups.items():
                counts[members] = untolerated_soft(tolerations, taints)
            self._soft_cache[tolerations] = counts
        return counts

    def masks(self, workload: Workload, shape: Shape) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Over every node: (passes the shape's filters: GPU model, MIG mode and profile; passes the
        node selector and required node affinity; passes the taints and is not cordoned). Topology
        spread counts domains by these, per its node inclusion policies."""
        cluster = self.cluster
        shape_ok = np.ones(cluster.n, dtype=bool)
        if shape.gpu_model is not None:
            shape_ok &= cluster.node_model == cluster.model_code.get(shape.gpu_model, -2)
        if shape.kind != "cpu":
            shape_ok &= cluster.mig_node == (shape.kind == "mig")
        if shape.mig is not None:
            shape_ok &= self._mig_supported(shape)
        affinity_ok = self.selected(workload.node_selector) if workload.node_selector else np.ones(cluster.n, bool)
        if workload.rules is not None and workload.rules.required_terms is not None:
            affinity_ok = affinity_ok & self.index.required(workload.rules.required_terms)
        taints_ok = self.tolerated(workload.tolerations) & ~cluster.cordoned
        return shape_ok, affinity_ok, taints_ok

    def _mig_supported(self, shape: Shape) -> np.ndarray:
        """Nodes where the profile has the same geometry (same device memory, hence slice size) and,
        on nodes with fixed MIG partitions, where slices of the profile exist."""
        cluster = self.cluster
        assert shape.mig is not None
        mask = np.zeros(cluster.n, dtype=bool)
        for memory in np.unique(cluster.device_memory_gib).tolist():
            if cluster.mig(shape.mig.profile, int(memory)) == shape.mig:
                mask |= cluster.device_memory_gib == memory
        for i in cluster.mig_layout:  # fixed partitions: only nodes where the profile's slices exist
            mask[i] &= bool(cluster.fixed_slots(i, shape.mig.profile))
        return mask
