"""``TracePlacer``: the trace simulator's placement, one pod at a time, as the FGD paper's simulator does.

Per pod:

1. Filter: CPU and memory free, GPU model allowed, enough devices with ``gpu_milli`` free (whole
   pods need fully free devices).
2. Score every feasible node with the policy (``NodeScorer``; integer scores 0..100 like the
   Kubernetes framework, ``portal`` a finer key).
3. Pick the highest score; ties go to the lowest ``node_rank`` (the reference simulator shuffles node
   names per seed and keeps the first best node), or uniformly at random without a rank.
4. Devices: a sharing pod takes the device its policy prefers (FGD/portal: the device they scored;
   Random: a random fitting device; others: best fit, the fitting device with the least free milli,
   first on ties); whole-GPU pods take the lowest-indexed fully free devices.

Named apart from the engine's ``placement.Placer``, which places a job's replicas on a
``capacity.Cluster`` (with MIG, taints, quotas and gangs); this one places trace pods on the paper's
simpler model and is only used by ``scheduling.sim`` (the engine uses ``NodeScorer`` through
``plugins``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .arrays import MILLI, Choice, PodShape
from .scorer import NodeScorer

_NEAR_MILLI = 1e-6  # portal: scores this close to the best count as tied (float noise of the key)


@dataclass(slots=True)
class TracePlacer(NodeScorer):
    """Selects and places pods on its own free-capacity arrays (see the module docstring).

    ``rng`` drives every random choice (ties without ``node_rank``, the Random policy); pass a seeded
    generator for reproducible runs. ``node_rank`` (N,) orders ties, lowest wins.
    """

    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))
    node_rank: np.ndarray | None = None
    _model_masks: dict[tuple[str, ...], np.ndarray] = field(init=False, default_factory=dict)

    # 1. ------------------------------------------------------------------------------- filtering
    def feasible(self, pod: PodShape) -> np.ndarray:
        """Boolean mask of nodes that can host ``pod`` now."""
        ok = (self.cpu_free_milli >= pod.cpu_milli) & (self.memory_free_mib >= pod.memory_mib)
        if pod.gpu_count > 0:
            ok &= self._model_mask(pod.allowed_models)
            if pod.gpu_milli >= MILLI:
                ok &= self._gpu_full >= pod.gpu_count
            elif pod.gpu_count == 1:
                ok &= self._gpu_max >= pod.gpu_milli
            else:
                ok &= (self.gpu_free_milli >= pod.gpu_milli).sum(axis=1) >= pod.gpu_count
        return ok

    def _model_mask(self, allowed: tuple[str, ...]) -> np.ndarray:
        mask = self._model_masks.get(allowed)
        if mask is None:
            ids = self.nodes.model_ids
            if allowed:
                wanted = [i for i, m in enumerate(self.nodes.models) if m in allowed]
                mask = np.isin(ids, wanted)
            else:
                mask = ids >= 0
            self._model_masks[allowed] = mask
        return mask

    # 2.-4. --------------------------------------------------------------------------------- choosing
    def select(self, pod: PodShape) -> Choice | None:
        """Best node and devices for one pod; no state change. ``None`` when no node fits."""
        self._last = None
        idx = np.flatnonzero(self.feasible(pod))
        if idx.size == 0:
            return None
        if self.policy == "random":
            node = int(idx[self.rng.integers(idx.size)])
            return Choice(node, self._devices_random(pod, node), 0.0)
        score, device = self.score_nodes(pod, idx)
        best = score.max()
        if self.policy == "portal":
            pick = self._tie_break(idx[score >= best - _NEAR_MILLI])
        else:
            pick = self._tie_break(idx[score == best])
        if pod.is_sharing and device is not None:
            return Choice(pick, (int(device[pick]),), float(best))
        return Choice(pick, self._devices_default(pod, pick), float(best))

    def place(self, pod: PodShape) -> Choice | None:
        """``select``, then ``bind`` the choice."""
        choice = self.select(pod)
        if choice is not None:
            self.bind(pod, choice)
        return choice

    def _tie_break(self, cand: np.ndarray) -> int:
        if cand.size == 1:
            return int(cand[0])
        if self.node_rank is not None:
            return int(cand[np.argmin(self.node_rank[cand])])
        return int(cand[self.rng.integers(cand.size)])

    def _devices_default(self, pod: PodShape, node: int) -> tuple[int, ...]:
        free = self.gpu_free_milli[node]
        if pod.gpu_count == 0:
            return ()
        if pod.is_sharing:  # best fit device: least free milli that fits, first on ties
            fit = np.where(free >= pod.gpu_milli, free, MILLI + 1)
            return (int(np.argmin(fit)),)
        whole = np.flatnonzero(free >= MILLI)[: pod.gpu_count]
        return tuple(int(i) for i in whole)

    def _devices_random(self, pod: PodShape, node: int) -> tuple[int, ...]:
        if pod.is_sharing:
            fits = np.flatnonzero(self.gpu_free_milli[node] >= pod.gpu_milli)
            return (int(fits[self.rng.integers(fits.size)]),)
        return self._devices_default(pod, node)
