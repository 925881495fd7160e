"""Fragmentation-aware GPU placement (FGD) and the baselines of the FGD paper, over numpy arrays.

Reference: Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation
Gradient Descent", USENIX ATC '23, and its public simulator (hkust-adsl/kubernetes-scheduler-simulator),
whose scoring semantics this package reproduces: integer scores, first-best device, and ties going to
the first node of a per-seed random node order. Pure: stdlib + numpy only, no clock, all randomness
from a caller-seeded generator.

Modules, by concern:

``arrays``     the paper's model: ``NodeArrays`` (the cluster), ``PodShape`` (one pod's request),
               ``Choice`` (node and devices), ``POLICIES``.
``workload``   the target workload FGD plans for: ``TypicalPod``, ``typical_pods(shapes)`` and the
               array form the measures use.
``measure``    FGD's fragmentation and portal's stranded-GPU measure of candidate node states;
               ``fragmentation_milli(...)`` for a whole cluster state.
``pressure``   portal's model pressure: the share of the demand only some GPU models can serve,
               per free GPU of each model.
``cpubound``   portal's CPU-bound key: while the free GPU would need more CPU than is free, a sharing
               pod's last key before node order is the node's free GPU (most first).
``baselines``  DotProduct, BestFit, GpuClustering, GpuPacking node scores.
``deltas``     what placing a pod does to candidate nodes (fgd's and portal's score, device, measures
               after), over arrays of nodes or one node in plain numbers.
``states``     every node's state id, kept current by each change, and each shape's delta rows per
               state id (what ``NodeScorer`` caches).
``scorer``     ``NodeScorer``: free-capacity arrays kept current by ``bind``/``release``, the policy's
               cached node scores (``score_nodes``) and the cluster's fragmentation (``frag_milli``).
``placer``     ``TracePlacer(NodeScorer)``: the trace simulator's filter, tie-break and device choice
               (``select``, ``place``).
``plugins``    the engine's scorer plugins (``fgd``, ``portal``, the baselines, ``random``) over a
               ``NodeScorer`` mirrored from the cycle's ``capacity.Cluster``.

A new policy of the paper's kind: a score function in ``baselines`` (or a measure in ``measure``), its
name in ``POLICIES`` and ``plugins``, and a branch in ``NodeScorer.score_nodes``.
"""

from .arrays import MILLI, POLICIES, Choice, NodeArrays, PodShape
from .measure import fragmentation_milli
from .placer import TracePlacer
from .scorer import NodeScorer
from .workload import DEFAULT_POPULARITY, TypicalPod, typical_pods

__all__ = [
    "DEFAULT_POPULARITY",
    "MILLI",
    "POLICIES",
    "Choice",
    "NodeArrays",
    "NodeScorer",
    "PodShape",
    "TracePlacer",
    "TypicalPod",
    "fragmentation_milli",
    "typical_pods",
]
