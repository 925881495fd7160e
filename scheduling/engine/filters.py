"""Static placement filters, and the codes that explain why a node does not take a replica.

Static filters do not change during a cycle, so their result is a cached boolean mask per
(GPU model, kind, MIG geometry, node selector, tolerations). In filter order (a node is counted under
the first that rejects it):

1. cordoned (``unschedulable``);
2. GPU model not allowed (or not a GPU node);
3. MIG mode: whole GPUs and fractions need a non-MIG node, MIG profiles a MIG node;
4. MIG profile not supported on this node's device (same geometry, i.e. same device memory);
5. required node selector;
6. taints: every ``NoSchedule``/``NoExecute`` taint must be tolerated.

Then the fit rule (``fit``): GPUs, CPU, memory; its outcome maps onto the last three codes.
"""

from __future__ import annotations

import numpy as np

from .capacity import Cluster
from .fit import Shape
from .model import Taint, Toleration, Workload

REASONS = (
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
    FIT,
    CORDONED,
    MODEL,
    MIG_MODE,
    MIG_PROFILE,
    SELECTOR,
    TAINT,
    GPUS,
    CPU,
    MEMORY,
) = range(len(REASONS))


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


class StaticFilters:
    """The static filters over one :class:`Cluster`'s nodes, with their caches (one cycle)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.labels = [dict(node.labels) for node in cluster.nodes]
        self._taint_groups: dict[tuple[Taint, ...], list[int]] = {}
        for i, node in enumerate(cluster.nodes):
            self._taint_groups.setdefault(node.taints, []).append(i)
        self._tainted = np.array([bool(node.taints) for node in cluster.nodes], dtype=bool)
        self._tolerated_cache: dict[tuple[Toleration, ...], np.ndarray] = {}
        self._selector_cache: dict[tuple[tuple[str, str], ...], np.ndarray] = {}
        self._label_values: dict[str, np.ndarray] = {}
        self._eligible: dict[tuple[object, ...], tuple[np.ndarray, np.ndarray, int]] = {}
        self.soft_tainted = np.array(
            [any(t.effect == "PreferNoSchedule" for t in node.taints) for node in cluster.nodes], dtype=bool
        )
        self.any_soft_taint = bool(self.soft_tainted.any())

    def codes(self, workload: Workload, shape: Shape, nodes: np.ndarray, cordon: bool = True) -> np.ndarray:
        """First failing static filter per node in ``nodes`` (``FIT`` when all pass), vectorised.

        Codes are written from the last filter to the first, so the first failing one wins.
        ``cordon=False`` leaves the cordon out (the cluster as configured: a cordon is lifted again).
        """
        cluster = self.cluster
        codes = np.zeros(len(nodes), dtype=np.int8)
        if workload.tolerations or self._tainted.any():
            codes[~self.tolerated(workload.tolerations)[nodes]] = TAINT
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
        return codes

    def eligible(self, workload: Workload, shape: Shape) -> tuple[np.ndarray, np.ndarray, int]:
        """(boolean mask over the model's node slice, node indices, slice start) of the nodes passing
        every static filter. A GPU model's nodes are one contiguous slice (see ``Cluster``)."""
        key = (shape.gpu_model, shape.kind, shape.mig, workload.node_selector, workload.tolerations)
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
                ok = all(
                    tolerates(tolerations, t.key, t.value, t.effect)
                    for t in taints
                    if t.effect in ("NoSchedule", "NoExecute")
                )
                if not ok:
                    mask[members] = False
            self._tolerated_cache[tolerations] = mask
        return mask

    def selected(self, selector: tuple[tuple[str, str], ...]) -> np.ndarray:
        """Nodes whose labels match every ``(key, value)`` of ``selector``."""
        mask = self._selector_cache.get(selector)
        if mask is None:
            mask = np.ones(self.cluster.n, dtype=bool)
            for key, value in selector:
                values = self._label_values.get(key)
                if values is None:
                    values = np.array([labels.get(key, "") for labels in self.labels], dtype=object)
                    self._label_values[key] = values
                mask &= values == value
            self._selector_cache[selector] = mask
        return mask

    def soft_taint_untolerated(self, workload: Workload, nodes: np.ndarray) -> np.ndarray:
        """Nodes of ``nodes`` with a ``PreferNoSchedule`` taint the workload does not tolerate."""
        return self.soft_tainted[nodes] & np.array(
            [
                not all(
                    tolerates(workload.tolerations, t.key, t.value, t.effect)
                    for t in self.cluster.nodes[i].taints
                    if t.effect == "PreferNoSchedule"
                )
                for i in nodes.tolist()
            ],
            dtype=bool,
        )

    def _mig_supported(self, shape: Shape) -> np.ndarray:
        """Nodes where the profile has the same geometry (same device memory, hence slice size)."""
        cluster = self.cluster
        assert shape.mig is not None
        mask = np.zeros(cluster.n, dtype=bool)
        for memory in np.unique(cluster.device_memory_gib).tolist():
            if cluster.mig(shape.mig.profile, int(memory)) == shape.mig:
                mask |= cluster.device_memory_gib == memory
        return mask
