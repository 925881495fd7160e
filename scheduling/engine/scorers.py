"""Node scorers as plugins (Volcano-style named callbacks).

A scorer takes a :class:`ScoreContext` (the cluster, the replica shape, the candidate node indices)
and returns one float per candidate, higher is better. :func:`register_scorer` adds one under a name
that ``Policy.placement`` (or a per-pool override) selects. How the votes of the placement scorer, the
preferred-affinity scorer and the topology scorer combine is written once, in
``votes.Votes.score``: each is scaled to [0, 1] over the candidates, then summed with weights.

A stateful scorer (``register_plugin``) is built once per cycle from a :class:`PluginSetup`, may
listen to every capacity change of the cluster (``Cluster.listeners``) and may choose the devices
inside the chosen node; stateless ones (``register_scorer``) use the default picker, which packs
fractions and MIG slices onto the busiest device that fits.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .capacity import Cluster
from .fit import Nodes, Shape
from .mig import MigGeometry, best_start


@dataclass(slots=True)
class ScoreContext:
    cluster: Cluster
    shape: Shape
    idx: np.ndarray  # candidate node indices (all feasible)
    workload_id: str
    seed: int


@dataclass(frozen=True, slots=True)
class PluginSetup:
    """What a plugin factory gets once per cycle, before any usage is applied to the cluster.

    ``typical`` is the observed mix of replica shapes ``(cpu_milli, gpu_milli per device, gpu_count,
    allowed_models)``, one entry per replica, for fragmentation-aware scorers.
    """

    cluster: Cluster
    seed: int
    typical: tuple[tuple[int, int, int, tuple[str, ...]], ...] = ()


DevicePick = tuple[tuple[int, ...], int | None]


class ScorerPlugin(Protocol):
    def score(self, ctx: ScoreContext) -> np.ndarray: ...

    def pick(self, cluster: Cluster, i: int, shape: Shape, workload_id: str) -> DevicePick | None:
        """Devices on node ``i`` for one replica, or ``None`` to use :func:`pick_devices`."""
        ...


Scorer = Callable[[ScoreContext], np.ndarray]
PluginFactory = Callable[[PluginSetup], ScorerPlugin]

PLUGINS: dict[str, PluginFactory] = {}


@dataclass(slots=True)
class _FunctionPlugin:
    scorer: Scorer
    spread: bool = False

    def score(self, ctx: ScoreContext) -> np.ndarray:
        return self.scorer(ctx)

    def pick(self, cluster: Cluster, i: int, shape: Shape, workload_id: str) -> DevicePick | None:
        return pick_devices(cluster, i, shape, spread=self.spread)


def register_plugin(name: str, factory: PluginFactory) -> None:
    """Register a stateful scorer; ``factory`` runs once per cycle (see :class:`PluginSetup`)."""
    PLUGINS[name] = factory


def register_scorer(name: str, spread: bool = False) -> Callable[[Scorer], Scorer]:
    """Register a stateless scorer function under ``name``."""

    def decorate(scorer: Scorer) -> Scorer:
        PLUGINS[name] = lambda setup: _FunctionPlugin(scorer, spread)
        return scorer

    return decorate


_FEW_NODES = 256  # up to this many candidates, ``binpack_scores`` computes their scores directly


def binpack_scores(cluster: Cluster, shape: Shape, nodes: Nodes) -> np.ndarray:
    """``binpack``'s score of ``nodes`` (an index array or a slice), read from the arrays
    ``Cluster.apply`` keeps current; ``spread`` is its negation. A few nodes' scores are computed
    from the free arrays (``Cluster.pack_scores_at``: the same floats) instead."""
    if isinstance(nodes, np.ndarray) and len(nodes) <= _FEW_NODES:
        return cluster.pack_scores_at(nodes, shape.kind == "cpu")
    if shape.kind == "cpu":
        return cluster.cpu_pack_score[nodes]
    return cluster.pack_score[nodes]


@register_scorer("binpack")
def score_binpack(ctx: ScoreContext) -> np.ndarray:
    """Fill the fullest node first; CPU breaks ties among equally busy GPU nodes.

    Up to a constant per request: ``-(free GPU share of the node) - 0.01 * (free CPU share)``; for
    CPU-only work ``-(free CPU share)``.
    """
    return binpack_scores(ctx.cluster, ctx.shape, ctx.idx)


@register_scorer("spread", spread=True)
def score_spread(ctx: ScoreContext) -> np.ndarray:
    """Emptiest node first."""
    return -score_binpack(ctx)


def stable_random(workload_id: str, seed: int, size: int) -> np.ndarray:
    """Seeded per-job random numbers: the same snapshot and seed always give the same draw."""
    rng = np.random.default_rng([seed, zlib.crc32(workload_id.encode())])
    return rng.random(size)


def pick_devices(cluster: Cluster, i: int, shape: Shape, spread: bool = False) -> tuple[tuple[int, ...], int | None]:
    """Devices (and MIG start slice) for one replica on node ``i``; ``((), None)`` if none fit.

    Whole GPUs: the lowest contiguous block of fully free devices if there is one (NVLink
    neighbours), else the lowest free ones. Fractions: best fit (least free share that fits), or worst
    fit when ``spread``. MIG: the device and start that cost the fewest instances of the largest
    profiles (``mig.slot_loss``), then the busiest device, the lowest index and start.
    """
    count = int(cluster.gpu_count[i])
    if shape.kind == "cpu":
        return (), None
    if shape.mig is not None:
        return _pick_mig_slot(cluster, i, shape.mig)
    row = cluster.dev_free[i, :count].tolist()  # plain numbers: cheaper than numpy scalars one by one
    if shape.gpus:
        cap = int(cluster.dev_cap[i])
        masks = cluster.mig_mask[i, :count].tolist()
        free = [d for d in range(count) if row[d] == cap and masks[d] == 0]
        if len(free) < shape.gpus:
            return (), None
        for start in range(len(free) - shape.gpus + 1):
            block = free[start : start + shape.gpus]
            if block[-1] - block[0] == shape.gpus - 1:
                return tuple(block), None
        return tuple(free[: shape.gpus]), None
    fits = [d for d in range(count) if row[d] >= shape.milli]
    if not fits:
        return (), None
    chosen = max(fits, key=lambda d: (row[d], -d)) if spread else min(fits, key=lambda d: (row[d], d))
    return (chosen,), None


def _pick_mig_slot(cluster: Cluster, i: int, geometry: MigGeometry) -> tuple[tuple[int, ...], int | None]:
    """The (device, start) on node ``i`` whose loss of larger instances is least (see ``mig``); on a
    node with fixed partitions, its first free slice of the profile."""
    if cluster.mig_fixed[i]:
        slot = cluster.free_fixed_slot(i, geometry)
        return ((slot[0],), slot[1]) if slot is not None else ((), None)
    best: tuple[tuple[int, ...], int, int, int] | None = None
    masks, computes = cluster.mig_mask[i].tolist(), cluster.mig_compute[i].tolist()
    for d in range(int(cluster.gpu_count[i])):
        mask = masks[d]
        found = best_start(mask, computes[d], geometry)
        if found is not None:
            key = (found[0], -mask.bit_count(), d, found[1])
            if best is None or key < best:
                best = key
    if best is None:
        return (), None
    return (best[2],), best[3]
