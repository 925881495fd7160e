"""The FGD paper's arrival-only protocol ("workload inflation"), exactly.

Steps, per seed:

1. Shuffle the pod list with the seed; then append pods drawn uniformly with replacement from the
   original list (named ``<name>-tuned-<i>``) until the next one would push the total GPU request
   (``gpu_count * gpu_milli``) past ``ratio`` (1.3) times the cluster's GPU capacity.
2. Submit the pods one at a time in that order; each is placed or fails (dropped, no retry); pods
   never leave.
3. After every pod, record the arrived GPU request (placed or failed), the allocated GPU milli and the
   cluster fragmentation.
4. Unallocated GPU % at X % arrival = 100 - mean allocation % over the pods whose arrived % rounds
   (half up) to X. The headline is X = 100.

The placement itself is :class:`scheduling.engine.frag.TracePlacer` (the engine's code for these
policies); the typical pods FGD plans for come from the original (un-inflated) pod list, as in the paper.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from scheduling.engine.frag import NodeArrays, PodShape, TracePlacer, TypicalPod, typical_pods
from scheduling.sim.trace import TracePod

DEFAULT_RATIO = 1.3
CURVE_MAX_PCT = 130


@dataclass(frozen=True, slots=True)
class ArrivalPod:
    seq: int
    name: str
    pod: TracePod


def inflate(
    pods: Sequence[TracePod], capacity_gpu_milli: int, *, seed: int, ratio: float = DEFAULT_RATIO
) -> list[ArrivalPod]:
    """Step 1: the seeded arrival sequence (shuffled originals, then resampled copies)."""
    if not pods:
        return []
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(pods))
    seq = [pods[i] for i in order]
    names = [p.name for p in seq]
    total = sum(p.total_gpu_milli for p in pods)
    target = ratio * capacity_gpu_milli
    if total < target and any(p.total_gpu_milli > 0 for p in pods):
        i = 0
        while True:
            pick = pods[int(rng.integers(len(pods)))]
            if total + pick.total_gpu_milli > target:
                break
            total += pick.total_gpu_milli
            seq.append(pick)
            names.append(f"{pick.name}-tuned-{i}")
            i += 1
    return [ArrivalPod(k, name, pod) for k, (name, pod) in enumerate(zip(names, seq, strict=True))]


@dataclass(frozen=True, slots=True)
class ArrivalRun:
    """Per-pod results of one run, in arrival order (arrays of length = number of arrived pods)."""

    policy: str
    seed: int
    arrivals: list[ArrivalPod]
    node: np.ndarray  # int, -1 = failed
    gpu_indices: list[tuple[int, ...]]
    arrived_milli: np.ndarray  # cumulative GPU request that has arrived, after each pod
    allocated_milli: np.ndarray  # GPU milli allocated, after each pod
    frag_milli: np.ndarray  # cluster fragmentation after each pod
    capacity_gpu_milli: int
    wall_s: float

    @property
    def arrived_pct(self) -> np.ndarray:
        return 100.0 * self.arrived_milli / self.capacity_gpu_milli

    @property
    def allocated_pct(self) -> np.ndarray:
        return 100.0 * self.allocated_milli / self.capacity_gpu_milli

    @property
    def failed(self) -> int:
        return int((self.node < 0).sum())

    def curve(self) -> np.ndarray:
        """Unallocated GPU % at X = 0..130 % arrival (NaN where no pod's arrival rounds to X)."""
        return unallocated_curve(self.arrived_pct, self.allocated_pct)

    def frag_curve(self) -> np.ndarray:
        return bucket_mean(self.arrived_pct, 100.0 * self.frag_milli / self.capacity_gpu_milli)

    def headline(self) -> float:
        return float(self.curve()[100])


def bucket_mean(arrived_pct: np.ndarray, values: np.ndarray, top: int = CURVE_MAX_PCT) -> np.ndarray:
    """Mean of ``values`` over the pods whose arrived % rounds (half up) to each X in 0..top."""
    bucket = np.floor(np.asarray(arrived_pct, dtype=np.float64) + 0.5).astype(np.int64)
    keep = (bucket >= 0) & (bucket <= top)
    sums = np.bincount(bucket[keep], weights=np.asarray(values, dtype=np.float64)[keep], minlength=top + 1)
    counts = np.bincount(bucket[keep], minlength=top + 1)
    out = np.full(top + 1, np.nan)
    np.divide(sums, counts, out=out, where=counts > 0)
    return out


def unallocated_curve(arrived_pct: np.ndarray, allocated_pct: np.ndarray, top: int = CURVE_MAX_PCT) -> np.ndarray:
    """Step 4: 100 - mean allocation % per rounded arrival %."""
    return 100.0 - bucket_mean(arrived_pct, allocated_pct, top)


def run_arrival(
    nodes: NodeArrays,
    arrivals: Sequence[ArrivalPod],
    policy: str,
    *,
    seed: int,
    typical: Sequence[TypicalPod],
    workload: Sequence[TypicalPod] = (),
    on_pod: Callable[[], None] | None = None,
) -> ArrivalRun:
    """Steps 2-3 for one policy on one arrival sequence.

    ``typical`` is the table FGD and ``portal`` plan for, and the fragmentation metric of every policy.
    """
    started = time.perf_counter()
    rng = np.random.default_rng([seed, 0x5EED])
    # Ties go to the first node of a per-seed random node order, as in the reference simulator
    # (which prefixes node names with a random permutation and keeps the first best node).
    rank = np.random.default_rng([seed, 0x0DE]).permutation(len(nodes))
    placer = TracePlacer(nodes, policy, typical=typical, workload=workload, rng=rng, node_rank=rank)
    n = len(arrivals)
    node = np.full(n, -1, dtype=np.int64)
    gpu_indices: list[tuple[int, ...]] = [()] * n
    arrived = np.zeros(n, dtype=np.int64)
    allocated = np.zeros(n, dtype=np.int64)
    frag = np.zeros(n, dtype=np.float64)
    arrived_total = allocated_total = 0
    requests: dict[int, PodShape] = {}
    for k, a in enumerate(arrivals):
        req = requests.get(id(a.pod))
        if req is None:
            req = requests[id(a.pod)] = a.pod.request()
        choice = placer.place(req)
        arrived_total += a.pod.total_gpu_milli
        if choice is not None:
            node[k] = choice.node
            gpu_indices[k] = choice.gpu_indices
            allocated_total += a.pod.total_gpu_milli
        arrived[k] = arrived_total
        allocated[k] = allocated_total
        frag[k] = placer.frag_milli()
        if on_pod is not None:
            on_pod()
    return ArrivalRun(
        policy=policy,
        seed=seed,
        arrivals=list(arrivals),
        node=node,
        gpu_indices=gpu_indices,
        arrived_milli=arrived,
        allocated_milli=allocated,
        frag_milli=frag,
        capacity_gpu_milli=nodes.total_gpu_milli(),
        wall_s=time.perf_counter() - started,
    )


def typical_of(pods: Sequence[TracePod]) -> tuple[TypicalPod, ...]:
    """FGD's target workload, from the original pod list."""
    return typical_pods(p.shape() for p in pods)


def workload_of(pods: Sequence[TracePod]) -> tuple[TypicalPod, ...]:
    """Every shape of the original pod list with its frequency (``portal``'s scarcity)."""
    return typical_pods((p.shape() for p in pods), popularity=1.0)
