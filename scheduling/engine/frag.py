"""Fragmentation-aware GPU placement (FGD) and the baselines of the FGD paper, over numpy arrays.

Reference: Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation
Gradient Descent", USENIX ATC '23, and its public simulator (hkust-adsl/kubernetes-scheduler-simulator),
whose scoring semantics this module reproduces: integer scores, first-best device, and ties going to
the first node of a per-seed random node order.

API (stable; pure: stdlib + numpy only, no clock, all randomness from a caller-seeded generator)
------------------------------------------------------------------------------------------------
``POLICIES``                names accepted by :class:`Placer`: ``fgd random dotprod clustering packing
                            bestfit portal`` (``portal`` is our default, FGD refined; see below).
``NodeArrays``              the cluster as arrays (node names, GPU model per node, capacities).
``NodeArrays.of(rows)``     build it from ``(name, gpu_model | None, gpu_count, cpu_milli, memory_mib)``.
``PodRequest``              one pod: ``cpu_milli, memory_mib, gpu_milli`` (per device: 1..999 = a share
                            of one device, 1000 = whole devices), ``gpu_count`` (0 = CPU-only; > 1 needs
                            whole devices), ``allowed_models`` (empty = any GPU model).
``TypicalPod``              one entry of the target workload (resources + frequency) FGD plans for.
``typical_pods(requests)``  the paper's target workload from a pod list: distinct resource shapes by
                            popularity until 95 % of pods are covered, frequencies renormalised.
``target_workload(policy, requests)``  the table to pass as ``typical`` for a policy (all use FGD's).
``fragmentation_milli(...)``  FGD's cluster fragmentation of a given free-capacity state.
``Placer(nodes, policy, typical=..., node_rank=..., rng=..., tuning=PortalTuning())``
    ``typical`` is required for ``fgd``/``portal`` (and gives every policy ``.frag_milli()``);
    ``node_rank`` (N,) orders ties (lowest wins; ``None`` = uniformly random with ``rng``).
    ``.select(pod) -> Choice | None``  best node and devices for one pod; no state change. ``None`` when
                                       no node fits (CPU, memory, GPU model, free devices).
    ``.bind(pod, choice)``             take the capacity; ``.release(pod, choice)`` gives it back.
    ``.place(pod)``                    select + bind; returns the choice or ``None``.
    ``.score_nodes(pod, idx)``         the scores ``select`` maximises for nodes ``idx`` (+ devices).
    ``.invalidate()``                  drop cached scores after editing the arrays below directly.
    ``.cpu_free_milli / .memory_free_mib / .gpu_free_milli``  live free-capacity arrays (read only);
                                       ``gpu_free_milli`` is ``(nodes, max_gpus)``; -1 pads absent devices.
    ``.frag_milli()``                  cluster GPU fragmentation (milli-GPU) w.r.t. the typical pods.
``Choice(node, gpu_indices, score)``   ``node`` indexes ``NodeArrays.names``.

A Placer can be seeded with existing usage by calling ``bind`` for each running pod before scoring.

Algorithm (per pod, as the paper's simulator does it)
-----------------------------------------------------
1. Filter: CPU and memory free, GPU model allowed, enough devices with ``gpu_milli`` free (whole pods
   need fully free devices).
2. Score every feasible node with the policy (integer scores 0..100 like the Kubernetes framework).
3. Pick the highest score; ties go to the lowest ``node_rank`` (the reference simulator shuffles node
   names per seed and keeps the first best node), or uniformly at random without a rank.
4. Devices: a sharing pod takes the device its policy prefers (FGD: the first device that minimises the
   node's fragmentation; Random: a random fitting device; others: best fit, the fitting device with the
   least free milli, first on ties); whole-GPU pods take the lowest-indexed fully free devices.

FGD's fragmentation of a node for the typical pods ``t`` (frequency ``p_t``), in milli-GPU:
``sum_t p_t * F(node, t)`` where ``F`` is the node's free GPU milli if ``t`` cannot run there (CPU short,
GPU model not allowed, too few devices with enough free milli, or ``t`` is CPU-only), else the free milli
on devices too small for ``t``. Score = ``int(100 * sigmoid((F_before - F_after) / 1000))``.

``portal`` (our default) keeps FGD's decision and only refines its ties (its 0..100 integer scores tie
a lot): key = (FGD's integer score, secondary, node order). The secondary key is, for a GPU-sharing pod,
the tightest device (least milli left on the device after placement); for a CPU-only pod, the least
free GPU on the node, then the least free CPU (CPU stays free where GPUs are still free); for other
pods the decrease of *stranded* GPU: for each typical pod, the GPU the node could not fill with
copies of it given devices, CPU and memory together (FGD only asks whether one copy fits, so it
misses a node whose CPU will run out before its GPUs). ``PortalTuning`` holds the knobs; the defaults are the
measured best (docs/simulator.md lists what was tried).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

POLICIES: tuple[str, ...] = ("fgd", "random", "dotprod", "clustering", "packing", "bestfit", "portal")

MILLI = 1000
MAX_SPEC_CPU_MILLI = 128_000  # the reference simulator's normalisers (largest node spec)
MAX_SPEC_GPU_MILLI = 8_000
MAX_NODE_SCORE = 100
DEFAULT_POPULARITY = 0.95  # the paper's typical-pod coverage threshold
PORTAL_POPULARITY = 0.95  # portal's typical-pod coverage
PORTAL_MEMORY = False  # whether portal's table keys shapes by memory too
_MAX_AFFINITY = 9  # clustering tags: 0 = sharing pod, k = pod of k whole GPUs (k <= 8)
_LEX = 1e9  # weight of the primary (integer) score in portal's lexicographic key


@dataclass(frozen=True, slots=True)
class PodRequest:
    """Per-pod request. ``gpu_milli`` is per device; 0 with ``gpu_count == 0`` for CPU-only pods."""

    cpu_milli: int
    memory_mib: int = 0
    gpu_milli: int = 0
    gpu_count: int = 0
    allowed_models: tuple[str, ...] = ()

    @property
    def is_sharing(self) -> bool:
        return self.gpu_count == 1 and 0 < self.gpu_milli < MILLI

    @property
    def total_gpu_milli(self) -> int:
        return self.gpu_milli * self.gpu_count


@dataclass(frozen=True, slots=True)
class TypicalPod:
    cpu_milli: int
    gpu_milli: int
    gpu_count: int
    allowed_models: tuple[str, ...]
    frequency: float  # 0..1, sums to 1 over the list
    memory_mib: int = 0  # 0 = memory not part of the shape (FGD's table ignores memory)


@dataclass(frozen=True, slots=True)
class PortalTuning:
    """Knobs of the ``portal`` policy; the defaults are the measured best (docs/simulator.md)."""

    demand_weighted: bool = False  # weight typical pods by GPU demand instead of by count
    exact: bool = True  # rank nodes by the exact fragmentation decrease (False: FGD's integer sigmoid)
    tie: str = "rank"  # among (near-)ties: "bestfit" (least free GPU, then CPU) or "rank" (node order)
    near_milli: float = 1e-6  # decreases within this many milli-GPU of the best count as ties
    measure: str = "stranded"  # "stranded" (copies that still fit, CPU-aware) or "fgd"
    primary: str = "fgd"  # "fgd": FGD's integer score decides first, the measure breaks its ties; "none"
    primary_gpu_weight: float = 0.0  # the reference's GpuResWeight for the primary table (0 = FGD's)
    primary_slack: int = 0  # FGD scores within this many points of the best count as tied
    share_secondary: str = "devicefit"  # sharing pods' secondary key: "devicefit" (tightest device) or "measure"
    # CPU-only pods' secondary key: "leastgpu+bestfit" (least free GPU, then least free CPU: keep CPU
    # where GPUs are still free), "leastgpu" (then the measure) or the "measure".
    cpu_secondary: str = "leastgpu+bestfit"
    device_rule: str = "key"  # sharing pods: device by the full key, or by the "measure" alone
    device_tie: str = "first"  # sharing pods, equally good devices: "first" index or "bestfit" (fullest)


@dataclass(frozen=True, slots=True)
class Choice:
    node: int
    gpu_indices: tuple[int, ...] = ()
    score: float = 0.0


@dataclass(frozen=True, slots=True)
class NodeArrays:
    """Static description of the nodes. Arrays are never mutated (the Placer copies what it changes)."""

    names: tuple[str, ...]
    models: tuple[str, ...]  # distinct GPU models; ``model_ids`` index it, -1 = CPU-only node
    model_ids: np.ndarray  # (N,) int
    gpu_count: np.ndarray  # (N,) int
    cpu_milli: np.ndarray  # (N,) int64 capacity
    memory_mib: np.ndarray  # (N,) int64 capacity

    @classmethod
    def of(cls, rows: Iterable[tuple[str, str | None, int, int, int]]) -> NodeArrays:
        """Rows are ``(name, gpu_model or None, gpu_count, cpu_milli, memory_mib)``."""
        rows = list(rows)
        models = tuple(sorted({m for _, m, g, _, _ in rows if m and g > 0}))
        index = {m: i for i, m in enumerate(models)}
        return cls(
            names=tuple(r[0] for r in rows),
            models=models,
            model_ids=np.array([index.get(m, -1) if m and g > 0 else -1 for _, m, g, _, _ in rows], dtype=np.int64),
            gpu_count=np.array([r[2] for r in rows], dtype=np.int64),
            cpu_milli=np.array([r[3] for r in rows], dtype=np.int64),
            memory_mib=np.array([r[4] for r in rows], dtype=np.int64),
        )

    def __len__(self) -> int:
        return len(self.names)

    @property
    def max_gpus(self) -> int:
        return max(1, int(self.gpu_count.max(initial=0)))

    def total_gpu_milli(self) -> int:
        return int(self.gpu_count.sum()) * MILLI


def typical_pods(
    requests: Iterable[tuple[int, int, int, tuple[str, ...]]],
    *,
    popularity: float = DEFAULT_POPULARITY,
    include_cpu_pods: bool = True,
    gpu_weight: float = 0.0,
) -> tuple[TypicalPod, ...]:
    """The target workload FGD optimises for, built as the reference simulator does.

    ``requests`` are ``(cpu_milli, gpu_milli, gpu_count, allowed_models)`` per pod. Shapes are counted
    (a whole-GPU pod counts ``1 + gpu_count * gpu_weight``), sorted by count then shape, both descending,
    and the most popular are kept until their cumulative count reaches ``popularity`` of the total;
    the kept frequencies are renormalised to sum to 1.
    """
    counts: dict[tuple[int, int, int, tuple[str, ...], int], float] = {}
    total = 0.0
    for request in requests:
        cpu, milli, num, models = request[:4]
        memory = int(request[4]) if len(request) > 4 else 0  # type: ignore[misc]
        if not include_cpu_pods and num == 0:
            continue
        weight = 1.0 + num * gpu_weight if gpu_weight > 0 and milli == MILLI else 1.0
        key = (int(cpu), int(milli), int(num), tuple(models), memory)
        counts[key] = counts.get(key, 0.0) + weight
        total += weight
    if not counts:
        return ()
    # Go: sort.Reverse on (count, then cpu, milli, num, model string) ascending.
    ordered = sorted(counts.items(), key=lambda kv: (kv[1], kv[0][0], kv[0][1], kv[0][2], "|".join(kv[0][3]), kv[0][4]))
    ordered.reverse()
    expected = popularity * total
    kept: list[tuple[tuple[int, int, int, tuple[str, ...], int], float]] = []
    cum = 0.0
    for key, cnt in ordered:
        if cum >= expected:
            break
        kept.append((key, cnt))
        cum += cnt
    return tuple(TypicalPod(k[0], k[1], k[2], k[3], cnt / cum, k[4]) for k, cnt in kept)


def target_workload(
    policy: str, requests: Iterable[tuple[int, int, int, tuple[str, ...], int]]
) -> tuple[TypicalPod, ...]:
    """The table a policy plans for, from ``(cpu_milli, gpu_milli, gpu_count, models, memory_mib)``.

    ``fgd`` gets the paper's typical pods (memory ignored); ``portal`` its own table (see
    ``PORTAL_POPULARITY`` / ``PORTAL_MEMORY``); other policies need none and get FGD's, which the
    Placer uses only to report fragmentation.
    """
    if policy == "portal":
        rows = (r if PORTAL_MEMORY else r[:4] for r in requests)
        return typical_pods(rows, popularity=PORTAL_POPULARITY)  # type: ignore[arg-type]
    return typical_pods(r[:4] for r in requests)  # type: ignore[misc]


@dataclass(slots=True)
class _TypicalArrays:
    cpu: np.ndarray  # (T,)
    mem: np.ndarray  # (T,) memory MiB, all 0 when memory is not part of the table
    milli: np.ndarray  # (T,) > 0 (GPU typical pods only)
    num: np.ndarray  # (T,)
    freq: np.ndarray  # (T,)
    access: np.ndarray  # (M + 1, T) bool; row M is the CPU-only node
    cpu_only_freq: float  # total frequency of CPU-only typical pods: always count the whole free GPU
    uses_memory: bool = False
    any_access: bool = True  # every typical pod may use every node (no GPU-model restrictions)
    umilli: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # (U,) distinct gpu_milli
    uidx: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # (T,) index into umilli

    @classmethod
    def build(
        cls,
        typical: Sequence[TypicalPod],
        models: tuple[str, ...],
        demand_weighted: bool,
        gpu_weight: float = 0.0,
    ) -> _TypicalArrays:
        gpu = [t for t in typical if t.gpu_milli > 0]
        weights = {
            id(t): t.frequency * (t.gpu_milli * t.gpu_count / MILLI if demand_weighted else 1.0) for t in typical
        }
        if gpu_weight > 0:
            # The reference's GpuResWeight: a whole-GPU shape counts 1 + gpu_count * weight times.
            for t in typical:
                if t.gpu_milli >= MILLI:
                    weights[id(t)] *= 1.0 + t.gpu_count * gpu_weight
            norm = sum(weights.values()) or 1.0
            weights = {k: v / norm for k, v in weights.items()}
        if demand_weighted:
            # CPU-only pods strand no GPU: weight them like a small share so they still count a little.
            for t in typical:
                if t.gpu_milli == 0:
                    weights[id(t)] = t.frequency * 0.1
            norm = sum(weights.values()) or 1.0
            weights = {k: v / norm for k, v in weights.items()}
        access = np.ones((len(models) + 1, len(gpu)), dtype=bool)
        for j, t in enumerate(gpu):
            if t.allowed_models:
                for i, m in enumerate(models):
                    access[i, j] = m in t.allowed_models
                access[len(models), j] = False
        return cls(
            cpu=np.array([t.cpu_milli for t in gpu], dtype=np.int64),
            mem=np.array([t.memory_mib for t in gpu], dtype=np.int64),
            milli=np.array([t.gpu_milli for t in gpu], dtype=np.int64),
            num=np.array([t.gpu_count for t in gpu], dtype=np.int64),
            freq=np.array([weights[id(t)] for t in gpu], dtype=np.float64),
            access=access,
            cpu_only_freq=float(sum(weights[id(t)] for t in typical if t.gpu_milli == 0)),
            uses_memory=any(t.memory_mib > 0 for t in gpu),
            any_access=bool(access.all()),
            umilli=np.array(sorted({t.gpu_milli for t in gpu}), dtype=np.int64),
            uidx=np.array([sorted({u.gpu_milli for u in gpu}).index(t.gpu_milli) for t in gpu], dtype=np.int64),
        )


def _frag_milli(
    cpu: np.ndarray, mem: np.ndarray, gpu: np.ndarray, model_row: np.ndarray, tp: _TypicalArrays
) -> np.ndarray:
    """Expected fragmented GPU milli of each candidate node state (FGD's ``FragAmountSumExceptQ3``).

    ``cpu`` (C,), ``gpu`` (C, D) with -1 padding, ``model_row`` (C,) row index into ``tp.access``.
    """
    free = np.maximum(gpu, 0)
    total = free.sum(axis=1).astype(np.float64)
    out = total * tp.cpu_only_freq
    if tp.milli.size == 0:
        return out
    # Device work is shared by typical pods with the same gpu_milli (U distinct values, U << T).
    fits = gpu[:, :, None] >= tp.umilli[None, None, :]  # (C, D, U)
    count = fits.sum(axis=1)[:, tp.uidx]  # (C, T)
    small = (total[:, None] - np.einsum("cd,cdu->cu", free.astype(np.float64), fits))[:, tp.uidx]
    satisfied = (count >= tp.num[None, :]) & (cpu[:, None] >= tp.cpu[None, :])
    if not tp.any_access:
        satisfied &= tp.access[model_row]
    if tp.uses_memory:
        satisfied &= mem[:, None] >= tp.mem[None, :]
    per_type = np.where(satisfied, small, total[:, None])  # too-small devices only, or everything
    return out + per_type @ tp.freq


def _frag_and_stranded(
    cpu: np.ndarray, mem: np.ndarray, gpu: np.ndarray, model_row: np.ndarray, tp: _TypicalArrays
) -> tuple[np.ndarray, np.ndarray]:
    """``(_frag_milli, _stranded_milli)`` of the same candidates in one pass (shared device work)."""
    free = np.maximum(gpu, 0)
    total = free.sum(axis=1).astype(np.float64)
    out = total * tp.cpu_only_freq
    if tp.milli.size == 0:
        return out, out.copy()
    per_device = free[:, :, None] // tp.umilli[None, None, :]  # (C, D, U) copies per device
    fits = per_device > 0  # gpu_milli <= 1000, so one copy fits iff the device has the milli
    count = fits.sum(axis=1)[:, tp.uidx]  # (C, T)
    small = (total[:, None] - np.einsum("cd,cdu->cu", free.astype(np.float64), fits))[:, tp.uidx]
    cpu_ok = cpu[:, None] >= tp.cpu[None, :]
    satisfied = (count >= tp.num[None, :]) & cpu_ok
    copies = per_device.sum(axis=1)[:, tp.uidx]
    copies = np.where((tp.milli < MILLI)[None, :], copies, copies // tp.num[None, :])
    copies = np.minimum(copies, np.maximum(cpu, 0)[:, None] // np.maximum(tp.cpu, 1)[None, :])
    if not tp.any_access:
        access = tp.access[model_row]
        satisfied &= access
        copies = np.where(access, copies, 0)
    if tp.uses_memory:
        satisfied &= mem[:, None] >= tp.mem[None, :]
        copies = np.minimum(copies, np.maximum(mem, 0)[:, None] // np.maximum(tp.mem, 1)[None, :])
    frag = out + np.where(satisfied, small, total[:, None]) @ tp.freq
    stranded = out + (total[:, None] - copies * (tp.milli * tp.num)[None, :]) @ tp.freq
    return frag, stranded


def _stranded_milli(
    cpu: np.ndarray, mem: np.ndarray, gpu: np.ndarray, model_row: np.ndarray, tp: _TypicalArrays
) -> np.ndarray:
    """Expected GPU milli a node could *not* fill with copies of a typical pod (``portal``'s measure).

    Where FGD asks "can one more ``t`` fit?", this counts how many copies of ``t`` the node can still
    take, bounded by devices, CPU and memory together, and calls everything else stranded. A node
    whose CPU runs out before its GPUs therefore shows its stranded GPUs before it is full.
    """
    free = np.maximum(gpu, 0)
    total = free.sum(axis=1).astype(np.float64)
    out = total * tp.cpu_only_freq
    if tp.milli.size == 0:
        return out
    per_device = (free[:, :, None] // tp.umilli[None, None, :]).sum(axis=1)[:, tp.uidx]  # (C, T) copies
    share = tp.milli < MILLI
    copies = np.where(share[None, :], per_device, per_device // tp.num[None, :])
    copies = np.minimum(copies, np.maximum(cpu, 0)[:, None] // np.maximum(tp.cpu, 1)[None, :])
    if tp.uses_memory:
        copies = np.minimum(copies, np.maximum(mem, 0)[:, None] // np.maximum(tp.mem, 1)[None, :])
    if not tp.any_access:
        copies = np.where(tp.access[model_row], copies, 0)
    usable = copies * (tp.milli * tp.num)[None, :]
    per_type = total[:, None] - usable
    return out + per_type @ tp.freq


def _new_cache(n: int) -> _ScoreCache:
    return _ScoreCache(np.full(n, -1, np.int64), np.zeros(n), np.zeros(n, np.int64), np.zeros(n), np.full(n, np.nan))


def _sigmoid_score(delta: np.ndarray) -> np.ndarray:
    # Go: int64(sigmoid(delta / 1000) * MaxNodeScore), truncation toward zero (values are positive).
    return np.floor(100.0 / (1.0 + np.exp(-delta / 1000.0)))


@dataclass(slots=True)
class _ScoreCache:
    version: np.ndarray  # (N,) node version each entry was computed at (-1 = never)
    score: np.ndarray  # (N,) float
    device: np.ndarray  # (N,) int, sharing pods only
    after: np.ndarray  # (N,) the policy's measure of the node after the best placement
    after_primary: np.ndarray  # (N,) FGD's measure after it (portal only; NaN otherwise)


@dataclass(slots=True)
class Placer:
    """Scores and places pods one at a time on mutable copies of the node capacities.

    ``rng`` drives every random choice (ties, the Random policy); pass a seeded generator for
    reproducible runs. ``typical`` is required for ``fgd`` and ``portal``.
    """

    nodes: NodeArrays
    policy: str
    typical: Sequence[TypicalPod] = ()
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))
    node_rank: np.ndarray | None = None  # (N,) tie-break order, lowest wins; None = uniform random
    tuning: PortalTuning = field(default_factory=PortalTuning)
    target: Sequence[TypicalPod] = ()  # portal's target workload (default: ``typical``)
    cpu_free_milli: np.ndarray = field(init=False)
    memory_free_mib: np.ndarray = field(init=False)
    gpu_free_milli: np.ndarray = field(init=False)
    _affinity: np.ndarray = field(init=False)  # (N, 9) pod counts per clustering tag
    _version: np.ndarray = field(init=False)
    _model_row: np.ndarray = field(init=False)
    _tp: _TypicalArrays | None = field(init=False)
    _frag_cache: _ScoreCache | None = field(init=False)
    _metric_tp: _TypicalArrays | None = field(init=False)
    _metric_node: np.ndarray = field(init=False)  # (N,) fragmentation per node, kept current
    _metric_total: float = field(init=False)
    _gpu_free_total: np.ndarray = field(init=False)  # (N,) free milli summed over devices
    _tp_memory: bool = field(init=False)
    _lexicographic: bool = field(init=False)
    _last: tuple[tuple[int, int, int, int], _ScoreCache] | None = field(init=False)
    _primary_tp: _TypicalArrays | None = field(init=False)
    _primary_cache: _ScoreCache | None = field(init=False)
    _gpu_max: np.ndarray = field(init=False)  # (N,) largest free milli on one device
    _gpu_full: np.ndarray = field(init=False)  # (N,) fully free devices
    _metric_memo: dict[tuple[int, int, bytes], float] = field(init=False)
    _measure: Callable[..., np.ndarray] = field(init=False)
    _score_caches: dict[tuple[int, int, int, int], _ScoreCache] = field(init=False)
    _model_masks: dict[tuple[str, ...], np.ndarray] = field(init=False)

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"unknown placement policy {self.policy!r}; expected one of {', '.join(POLICIES)}")
        n, d = len(self.nodes), self.nodes.max_gpus
        self.cpu_free_milli = self.nodes.cpu_milli.astype(np.int64).copy()
        self.memory_free_mib = self.nodes.memory_mib.astype(np.int64).copy()
        dev = np.arange(d)[None, :]
        self.gpu_free_milli = np.where(dev < self.nodes.gpu_count[:, None], MILLI, -1).astype(np.int64)
        self._affinity = np.zeros((n, _MAX_AFFINITY), dtype=np.int64)
        self._version = np.zeros(n, dtype=np.int64)
        self._model_row = np.where(self.nodes.model_ids >= 0, self.nodes.model_ids, len(self.nodes.models))
        self._score_caches = {}
        self._model_masks = {}
        self._gpu_free_total = np.maximum(self.gpu_free_milli, 0).sum(axis=1)
        self._gpu_max = self.gpu_free_milli.max(axis=1)
        self._gpu_full = np.count_nonzero(self.gpu_free_milli == MILLI, axis=1)
        self._metric_memo = {}
        self._frag_cache = None
        self._tp = self._metric_tp = None
        self._metric_node = np.zeros(n)
        self._metric_total = 0.0
        if self.typical:
            self._metric_tp = _TypicalArrays.build(self.typical, self.nodes.models, demand_weighted=False)
            self._metric_node = _frag_milli(
                self.cpu_free_milli, self.memory_free_mib, self.gpu_free_milli, self._model_row, self._metric_tp
            )
            self._metric_total = float(self._metric_node.sum())
            if self.policy == "fgd":
                self._tp = self._metric_tp
            elif self.policy == "portal":
                same = not self.target or tuple(self.target) == tuple(self.typical)
                self._tp = (
                    self._metric_tp
                    if same and not self.tuning.demand_weighted
                    else _TypicalArrays.build(
                        self.target or self.typical, self.nodes.models, demand_weighted=self.tuning.demand_weighted
                    )
                )
            if self._tp is not None:
                self._frag_cache = _new_cache(n)
        self._tp_memory = self._tp is not None and self._tp.uses_memory
        self._lexicographic = self.policy == "portal" and self.tuning.primary == "fgd"
        self._last = None
        self._primary_tp = self._primary_cache = None
        if self._lexicographic and self.tuning.primary_gpu_weight > 0:
            self._primary_tp = _TypicalArrays.build(
                self.typical, self.nodes.models, demand_weighted=False, gpu_weight=self.tuning.primary_gpu_weight
            )
            self._primary_cache = _new_cache(n)
        self._measure = (
            _stranded_milli if self.policy == "portal" and self.tuning.measure == "stranded" else _frag_milli
        )
        if self.policy in ("fgd", "portal") and not self.typical:
            raise ValueError(f"policy {self.policy!r} needs the typical pods (see typical_pods())")

    # ----------------------------------------------------------------------------------- filtering
    def feasible(self, pod: PodRequest) -> np.ndarray:
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

    # ------------------------------------------------------------------------------------ choosing
    def select(self, pod: PodRequest) -> Choice | None:
        self._last = None
        ok = self.feasible(pod)
        idx = np.flatnonzero(ok)
        if idx.size == 0:
            return None
        if self.policy == "random":
            node = int(idx[self.rng.integers(idx.size)])
            return Choice(node, self._devices_random(pod, node), 0.0)
        if self.policy in ("fgd", "portal"):
            score, device = self._frag_scores(pod, idx)
        else:
            score = self._baseline_scores(pod, idx)
            device = None
        if self.policy == "portal":
            if self._lexicographic and self.tuning.primary_slack > 0:
                # Nodes within ``primary_slack`` points of FGD's best all compete on the measure.
                primary = np.round(score / _LEX)
                near = primary >= primary.max() - self.tuning.primary_slack
                score = np.where(near, score - _LEX * primary, -np.inf)
            best = score.max()
            cand = idx[score >= best - self.tuning.near_milli]
            if cand.size > 1 and self.tuning.tie == "bestfit":
                # Best fit among equally good nodes: least free GPU, then least free CPU.
                free = self._gpu_free_total[cand]
                key = free * (MAX_SPEC_CPU_MILLI + 1) + self.cpu_free_milli[cand]
                cand = cand[key == key.min()]
            pick, node_score = self._tie_break(cand), float(best)
        else:
            best = score.max()
            pick, node_score = self._tie_break(idx[score == best]), float(best)
        if pod.is_sharing and device is not None:
            return Choice(pick, (int(device[pick]),), node_score)
        return Choice(pick, self._devices_default(pod, pick), node_score)

    def score_nodes(self, pod: PodRequest, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """The scores ``select`` maximises, for the (feasible) nodes ``idx``; higher is better.

        Returns ``(scores, device)``; ``device`` (indexed by node, not by position in ``idx``) is the
        device FGD/portal would give a GPU-sharing pod, ``None`` for other policies. Random has no
        scores (all zero). Ties are the caller's to break.
        """
        if self.policy in ("fgd", "portal"):
            return self._frag_scores(pod, idx)
        if self.policy == "random":
            return np.zeros(idx.size), None
        return self._baseline_scores(pod, idx), None

    def invalidate(self) -> None:
        """Forget every cached score (call after changing the free-capacity arrays directly)."""
        self._score_caches.clear()
        for cache in (self._frag_cache, self._primary_cache):
            if cache is not None:
                cache.version[:] = -1
        if self._metric_tp is not None:
            self._metric_memo.clear()
            for n in range(len(self.nodes)):
                self._metric_node[n] = self._metric_of(n)
            self._metric_total = float(self._metric_node.sum())
        self._gpu_free_total = np.maximum(self.gpu_free_milli, 0).sum(axis=1)
        self._gpu_max = self.gpu_free_milli.max(axis=1)
        self._gpu_full = np.count_nonzero(self.gpu_free_milli == MILLI, axis=1)

    def _tie_break(self, cand: np.ndarray) -> int:
        if cand.size == 1:
            return int(cand[0])
        if self.node_rank is not None:
            return int(cand[np.argmin(self.node_rank[cand])])
        return int(cand[self.rng.integers(cand.size)])

    def place(self, pod: PodRequest) -> Choice | None:
        choice = self.select(pod)
        if choice is not None:
            self.bind(pod, choice)
        return choice

    # ------------------------------------------------------------------------------ state changes
    def bind(self, pod: PodRequest, choice: Choice) -> None:
        self._change(pod, choice, -1)

    def release(self, pod: PodRequest, choice: Choice) -> None:
        self._change(pod, choice, +1)

    def _change(self, pod: PodRequest, choice: Choice, sign: int) -> None:
        n = choice.node
        self.cpu_free_milli[n] += sign * pod.cpu_milli
        self.memory_free_mib[n] += sign * pod.memory_mib
        for d in choice.gpu_indices:
            self.gpu_free_milli[n, d] += sign * pod.gpu_milli
            self._gpu_free_total[n] += sign * pod.gpu_milli
        if pod.gpu_count > 0:
            tag = 0 if pod.is_sharing else min(pod.gpu_count, _MAX_AFFINITY - 1)
            self._affinity[n, tag] -= sign
        if choice.gpu_indices:
            devices = self.gpu_free_milli[n]
            self._gpu_max[n] = devices.max()
            self._gpu_full[n] = np.count_nonzero(devices == MILLI)
        known = self._known_after(pod, choice, sign)
        self._version[n] += 1
        if known is not None and self._frag_cache is not None:
            # The scoring pass already measured this exact state: reuse it instead of recomputing.
            self._frag_cache.score[n] = known[0]
            self._frag_cache.version[n] = self._version[n]
        if self._metric_tp is not None:
            value = self._metric_after(n, known)
            self._metric_total += value - self._metric_node[n]
            self._metric_node[n] = value
            if self._measure is _frag_milli and self._tp is self._metric_tp and self._frag_cache is not None:
                self._frag_cache.score[n] = value
                self._frag_cache.version[n] = self._version[n]

    def _known_after(self, pod: PodRequest, choice: Choice, sign: int) -> tuple[float, float] | None:
        """(measure, FGD measure) of ``choice.node`` after binding, if the last select computed them."""
        last, self._last = self._last, None
        if sign > 0 or last is None or self._frag_cache is None:
            return None
        key, cache = last
        n = choice.node
        if key != (pod.cpu_milli, pod.gpu_milli, pod.gpu_count, pod.memory_mib if self._tp_memory else 0):
            return None
        if cache.version[n] != self._version[n]:
            return None
        if pod.is_sharing and choice.gpu_indices != (int(cache.device[n]),):
            return None
        return float(cache.after[n]), float(cache.after_primary[n])

    def _metric_after(self, n: int, known: tuple[float, float] | None) -> float:
        if known is not None and self._tp is self._metric_tp and self._measure is _frag_milli:
            return known[0]  # fgd: the policy's measure is the metric
        if known is not None and self._primary_tp is None and not np.isnan(known[1]):
            return known[1]  # portal: its primary key is the metric
        return self._metric_of(n)

    @property
    def _primary(self) -> _TypicalArrays:
        tp = self._primary_tp or self._metric_tp
        assert tp is not None
        return tp

    def _primary_before(self, idx: np.ndarray) -> np.ndarray:
        """Current FGD fragmentation of nodes ``idx`` under portal's primary table."""
        if self._primary_tp is None:
            return self._metric_node[idx]
        cache = self._primary_cache
        assert cache is not None
        stale = idx[cache.version[idx] != self._version[idx]]
        if stale.size:
            cache.score[stale] = _frag_milli(
                self.cpu_free_milli[stale],
                self.memory_free_mib[stale],
                self.gpu_free_milli[stale],
                self._model_row[stale],
                self._primary_tp,
            )
            cache.version[stale] = self._version[stale]
        return cache.score[idx]

    def _metric_of(self, n: int) -> float:
        """FGD fragmentation of node ``n``, memoised by node state (states repeat a lot)."""
        devices = self.gpu_free_milli[n]
        key = (int(self._model_row[n]), int(self.cpu_free_milli[n]), np.sort(devices).tobytes())
        value = self._metric_memo.get(key)
        if value is None:
            assert self._metric_tp is not None
            row = slice(n, n + 1)
            value = float(
                _frag_milli(
                    self.cpu_free_milli[row],
                    self.memory_free_mib[row],
                    self.gpu_free_milli[row],
                    self._model_row[row],
                    self._metric_tp,
                )[0]
            )
            self._metric_memo[key] = value
        return value

    # ----------------------------------------------------------------------------------- devices
    def _devices_default(self, pod: PodRequest, node: int) -> tuple[int, ...]:
        free = self.gpu_free_milli[node]
        if pod.gpu_count == 0:
            return ()
        if pod.is_sharing:  # best fit device: least free milli that fits, first on ties
            fit = np.where(free >= pod.gpu_milli, free, MILLI + 1)
            return (int(np.argmin(fit)),)
        whole = np.flatnonzero(free >= MILLI)[: pod.gpu_count]
        return tuple(int(i) for i in whole)

    def _devices_random(self, pod: PodRequest, node: int) -> tuple[int, ...]:
        if pod.is_sharing:
            fits = np.flatnonzero(self.gpu_free_milli[node] >= pod.gpu_milli)
            return (int(fits[self.rng.integers(fits.size)]),)
        return self._devices_default(pod, node)

    # ------------------------------------------------------------------------------ fragmentation
    def frag_milli(self) -> float:
        """Cluster fragmentation in milli-GPU: free GPU the typical pods cannot use, by frequency.

        Always FGD's unweighted definition (0 without typical pods), whatever the policy.
        """
        return self._metric_total

    def node_frag_milli(self) -> np.ndarray:
        """Per-node fragmentation (milli-GPU), FGD's unweighted definition."""
        return self._metric_node.copy()

    def _node_frag(self, idx: np.ndarray) -> np.ndarray:
        tp, cache = self._tp, self._frag_cache
        assert tp is not None
        assert cache is not None
        stale = idx[cache.version[idx] != self._version[idx]]
        if stale.size:
            cache.score[stale] = self._measure(
                self.cpu_free_milli[stale],
                self.memory_free_mib[stale],
                self.gpu_free_milli[stale],
                self._model_row[stale],
                tp,
            )
            cache.version[stale] = self._version[stale]
        return cache.score[idx]

    def _frag_scores(self, pod: PodRequest, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """FGD/portal score of each feasible node (and the device for sharing pods), cached per shape."""
        key = (pod.cpu_milli, pod.gpu_milli, pod.gpu_count, pod.memory_mib if self._tp_memory else 0)
        cache = self._score_caches.get(key)
        n = len(self.nodes)
        if cache is None:
            cache = self._score_caches[key] = _new_cache(n)
        stale = idx[cache.version[idx] != self._version[idx]]
        if stale.size:
            score, device, after, after_primary = self._frag_delta(pod, stale)
            cache.score[stale] = score
            cache.device[stale] = device
            cache.after[stale] = after
            cache.after_primary[stale] = after_primary
            cache.version[stale] = self._version[stale]
        self._last = (key, cache)
        return cache.score[idx], cache.device

    def _frag_delta(self, pod: PodRequest, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Node score from the fragmentation decrease (before - after); sharing pods try every device.

        ``fgd`` returns the reference's integer sigmoid score, ``portal`` the raw decrease in milli.
        """
        fgd = self.policy == "fgd" or not self.tuning.exact
        tp = self._tp
        assert tp is not None
        before = self._node_frag(idx)
        cpu = self.cpu_free_milli[idx] - pod.cpu_milli
        mem = self.memory_free_mib[idx] - pod.memory_mib
        gpu = self.gpu_free_milli[idx]
        rows = self._model_row[idx]
        k, d = gpu.shape
        if pod.is_sharing:
            valid = gpu >= pod.gpu_milli  # (k, d)
            ni, di = np.nonzero(valid)  # one candidate state per (node, fitting device)
            cand = gpu[ni]
            cand[np.arange(ni.size), di] -= pod.gpu_milli
            after, primary_after = self._after(cpu[ni], mem[ni], cand, rows[ni], tp)
            score = before[ni] - after
            if fgd:
                score = _sigmoid_score(score)
            if self._lexicographic and self.tuning.share_secondary == "devicefit":
                score = -(gpu[ni, di] - pod.gpu_milli).astype(np.float64)  # tightest device wins
            elif self._lexicographic and self.tuning.share_secondary == "none":
                score = np.zeros_like(score)  # FGD's score alone; node ties go to the tie rule
            elif self._lexicographic and self.tuning.share_secondary == "devicefit+measure":
                # Tightest device first; the measure (|decrease| < 10^4 milli) breaks its ties.
                score = -1e4 * (gpu[ni, di] - pod.gpu_milli) + score
            if primary_after is not None:
                score = score + _LEX * _sigmoid_score(self._primary_before(idx)[ni] - primary_after)
            delta = np.full((k, d), -np.inf)
            delta[ni, di] = score
            after_kd = np.zeros((k, d))
            after_kd[ni, di] = after
            primary_kd = np.full((k, d), np.nan)
            if primary_after is not None:
                primary_kd[ni, di] = primary_after
            device = np.argmax(delta, axis=1)  # first best device
            best = delta[np.arange(k), device]
            if self._lexicographic and self.tuning.device_rule == "measure":
                # Device by the measure alone (FGD's score only ranks nodes).
                finite = np.isfinite(delta)
                secondary = np.where(finite, delta - _LEX * np.round(np.where(finite, delta, 0) / _LEX), -np.inf)
                device = np.argmax(secondary, axis=1)
                best = delta[np.arange(k), device]
            if self.policy == "portal" and self.tuning.device_tie == "bestfit":
                # Among equally good devices, the fullest one (keeps emptier devices whole).
                tied = delta >= best[:, None] - self.tuning.near_milli
                device = np.argmin(np.where(tied, gpu, MILLI + 1), axis=1)
            rows_k = np.arange(k)
            return best, device, after_kd[rows_k, device], primary_kd[rows_k, device]
        if pod.gpu_count > 0:
            whole = gpu >= MILLI
            take = whole & (np.cumsum(whole, axis=1) <= pod.gpu_count)
            gpu = gpu - take * pod.gpu_milli
        after, primary_after = self._after(cpu, mem, gpu, rows, tp)
        delta = before - after
        if fgd:
            delta = _sigmoid_score(delta)
        if self._lexicographic and pod.gpu_count == 0 and self.tuning.cpu_secondary == "leastgpu":
            # CPU-only pods: nodes with the least free GPU first (keep CPU where GPUs are still free).
            delta = -1e4 * self._gpu_free_total[idx] + delta
        elif self._lexicographic and pod.gpu_count == 0 and self.tuning.cpu_secondary == "leastgpu+bestfit":
            delta = -1e4 * self._gpu_free_total[idx] - 0.05 * cpu  # 0.05 * cpu < 1e4: CPU only breaks ties
        if primary_after is not None:
            delta = delta + _LEX * _sigmoid_score(self._primary_before(idx) - primary_after)
        primary = np.full(k, np.nan) if primary_after is None else primary_after
        return delta, np.zeros(k, dtype=np.int64), after, primary

    def _after(
        self, cpu: np.ndarray, mem: np.ndarray, gpu: np.ndarray, rows: np.ndarray, tp: _TypicalArrays
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """The policy's measure of candidate states, and FGD's (portal's primary key) when used."""
        if not self._lexicographic:
            return self._measure(cpu, mem, gpu, rows, tp), None
        if tp is self._primary and self._measure is _stranded_milli:
            frag_after, stranded_after = _frag_and_stranded(cpu, mem, gpu, rows, tp)
            return stranded_after, frag_after
        return self._measure(cpu, mem, gpu, rows, tp), _frag_milli(cpu, mem, gpu, rows, self._primary)

    # ---------------------------------------------------------------------------------- baselines
    def _baseline_scores(self, pod: PodRequest, idx: np.ndarray) -> np.ndarray:
        cpu = self.cpu_free_milli[idx]
        free_total = self._gpu_free_total[idx]
        req_gpu = pod.total_gpu_milli
        if self.policy == "dotprod":
            # Tetris, merged GPU dimension, normalised by the largest node spec.
            dot = (cpu / MAX_SPEC_CPU_MILLI) * (pod.cpu_milli / MAX_SPEC_CPU_MILLI) + (
                free_total / MAX_SPEC_GPU_MILLI
            ) * (req_gpu / MAX_SPEC_GPU_MILLI)
            return np.floor(MAX_NODE_SCORE * (1.0 - dot / 2.0))
        if self.policy == "bestfit":
            left = 0.5 * (cpu - pod.cpu_milli) / MAX_SPEC_CPU_MILLI + 0.5 * (free_total - req_gpu) / MAX_SPEC_GPU_MILLI
            return np.floor((1.0 - left) * MAX_NODE_SCORE)
        if self.policy == "clustering":
            if pod.gpu_count == 0:
                return np.zeros(idx.size)
            tag = 0 if pod.is_sharing else min(pod.gpu_count, _MAX_AFFINITY - 1)
            aff = self._affinity[idx]
            kinds = (aff > 0).sum(axis=1)
            has = aff[:, tag] > 0
            base = (MAX_NODE_SCORE // 4) * (MAX_SPEC_GPU_MILLI - free_total) // MAX_SPEC_GPU_MILLI
            offset = np.where(has, np.where(kinds == 1, 75, 50), np.where(kinds == 0, 25, 0))
            return (base + offset).astype(np.float64)
        if self.policy == "packing":
            if pod.gpu_milli <= 0:
                return np.zeros(idx.size)
            return self._packing_scores(pod, idx)
        raise AssertionError(self.policy)

    def _packing_scores(self, pod: PodRequest, idx: np.ndarray) -> np.ndarray:
        gpu = self.gpu_free_milli[idx]
        count = self.nodes.gpu_count[idx]
        fully_free = (gpu == MILLI).sum(axis=1)
        # Devices the pod would use: fitting devices, least free first (stable), gpu_count of them.
        order = np.argsort(np.where(gpu < 0, MILLI + 1, gpu), axis=1, kind="stable")
        sorted_free = np.take_along_axis(gpu, order, axis=1)
        fit = sorted_free >= pod.gpu_milli
        use = fit & (np.cumsum(fit, axis=1) <= pod.gpu_count)
        whole_used = (use & (sorted_free == MILLI)).sum(axis=1)
        ratio = ((np.maximum(sorted_free, 0) * 100) // MILLI * use).sum(axis=1)
        shared = np.maximum(MAX_NODE_SCORE - ratio // 10, MAX_NODE_SCORE // 2)
        partly = np.maximum(MAX_NODE_SCORE // 2 - whole_used, MAX_NODE_SCORE // 3)
        empty = np.maximum(MAX_NODE_SCORE // 3 - fully_free, fully_free)
        score = np.where(fully_free == count, empty, np.where(whole_used > 0, partly, shared))
        return score.astype(np.float64)


def fragmentation_milli(
    nodes: NodeArrays,
    gpu_free_milli: np.ndarray,
    cpu_free_milli: np.ndarray,
    typical: Sequence[TypicalPod],
    memory_free_mib: np.ndarray | None = None,
) -> float:
    """Cluster fragmentation (milli-GPU) of a given free-capacity state, w.r.t. ``typical``."""
    tp = _TypicalArrays.build(typical, nodes.models, demand_weighted=False)
    rows = np.where(nodes.model_ids >= 0, nodes.model_ids, len(nodes.models))
    mem = nodes.memory_mib if memory_free_mib is None else memory_free_mib
    return float(_frag_milli(cpu_free_milli, mem, gpu_free_milli, rows, tp).sum())
