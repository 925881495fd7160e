"""Engine data model: frozen value types for a snapshot and the plan computed from it.

This module is the contract between the pure engine and its adapters (ORM, simulated cluster,
Kubernetes, trace simulator). Everything here is plain data: no Django, no I/O, no clock.

Units are in the names: ``*_milli`` is thousandths (CPU cores or GPUs), ``*_mib`` mebibytes,
``*_gib`` gibibytes, ``*_s`` seconds. Times are POSIX seconds (float) supplied by the caller.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from .windows import StartWindow

Labels = tuple[tuple[str, str], ...]
"""Node labels / selectors as sorted ``(key, value)`` pairs, hashable and deterministic."""


def labels_of(mapping: dict[str, str] | None) -> Labels:
    """Turn a dict into the canonical sorted-pairs form used throughout the engine."""
    return tuple(sorted((mapping or {}).items()))


class WorkloadState(StrEnum):
    PENDING = "pending"
    ADMITTED = "admitted"  # quota reserved and placed, pods not yet running
    RUNNING = "running"


class ReasonKind(StrEnum):
    QUOTA = "quota"
    PLACEMENT = "placement"
    GANG = "gang"
    BUDGET = "budget"
    ORDER = "order"  # blocked behind a higher-ranked job (strict FIFO head-of-line)
    INVALID = "invalid"
    PREEMPTING = "preempting"  # victims chosen; starts once they are gone
    WINDOW = "window"  # outside its start window (start after / daily hours)


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"  # NoSchedule | PreferNoSchedule | NoExecute


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""  # empty key with operator Exists tolerates everything
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str = ""  # empty = every effect


@dataclass(frozen=True, slots=True)
class TolerationGrant:
    """A taint a team may tolerate, as platform admins granted it (``taints.toleration_allowed``).

    ``all``: any toleration. Otherwise the toleration's key must be ``key``; an empty ``value`` or
    ``effect`` allows any."""

    key: str = ""
    value: str = ""
    effect: str = ""
    all: bool = False


# -- placement rules (Kubernetes' affinity vocabulary; matched in ``affinity``) ----------------------


@dataclass(frozen=True, slots=True)
class Requirement:
    """A node selector requirement: ``key`` ``operator`` ``values``.

    Operators: ``In``, ``NotIn``, ``Exists``, ``DoesNotExist``, ``Gt``, ``Lt`` (the label and the one
    value parsed as 64-bit integers). In a term's ``match_fields`` the key is ``metadata.name`` and the
    operator ``In`` or ``NotIn`` with one value."""

    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """Requirements that must all hold. A term without any requirement matches no node."""

    match_expressions: tuple[Requirement, ...] = ()
    match_fields: tuple[Requirement, ...] = ()


@dataclass(frozen=True, slots=True)
class PreferredTerm:
    weight: int  # 1..100; a node scores the sum of the weights of the terms it matches
    preference: NodeSelectorTerm


@dataclass(frozen=True, slots=True)
class AntiAffinityTerm:
    """Pod anti-affinity between a job's own replicas: no two (required) or as few as possible
    (preferred, ``weight`` 1..100) in one domain of ``topology_key``. Nodes without the label are in
    no domain."""

    topology_key: str
    weight: int = 0  # 0 = required


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """A topology spread constraint over a job's own replicas (Kubernetes' PodTopologySpread)."""

    max_skew: int
    topology_key: str
    when_unsatisfiable: str = "DoNotSchedule"  # DoNotSchedule | ScheduleAnyway
    min_domains: int = 1
    node_affinity_policy: str = "Honor"  # Honor | Ignore: which nodes' domains count
    node_taints_policy: str = "Ignore"  # Honor | Ignore


@dataclass(frozen=True)
class PlacementRules:
    """A job's placement rules beyond its GPU models, node selector and tolerations.

    ``required_terms``: required node affinity, terms OR-ed (``None`` = no requirement; an empty
    tuple matches no node). ``required_topology``: every replica of the gang in one domain of this
    level: ``node``, ``rack``, ``zone``, ``nvlink`` (the policy's labels) or a node label key.

    Not slotted, so its hash is computed once: rules can hold hundreds of values and sit in the keys
    of every per-cycle cache a job touches."""

    required_terms: tuple[NodeSelectorTerm, ...] | None = None
    preferred_terms: tuple[PreferredTerm, ...] = ()
    anti_affinity: tuple[AntiAffinityTerm, ...] = ()
    spread: tuple[SpreadConstraint, ...] = ()
    required_topology: str = ""

    def __hash__(self) -> int:
        cached = self.__dict__.get("_hash")
        if cached is None:
            fields = (self.required_terms, self.preferred_terms, self.anti_affinity, self.spread)
            cached = hash((*fields, self.required_topology))
            object.__setattr__(self, "_hash", cached)
        return cached

    def __getstate__(self) -> dict[str, object]:
        """Pickled without the cached hash: another process hashes strings differently (the dry run's
        state is handed from the scheduler to the web processes pickled), and a stale hash there would
        make equal rules miss each other in every dict and set."""
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    @property
    def dynamic(self) -> bool:
        """Whether a replica's room depends on where the job's other replicas went."""
        return bool(self.anti_affinity or self.spread)


@dataclass(frozen=True, slots=True)
class NodePool:
    """Nodes platform admins group (KAI/Run:ai node pools): the nodes whose labels match every pair of
    ``node_selector``, in the first pool that matches. ``placement`` overrides ``Policy.placement``
    there; ``overcommit_ratio`` lets fractional requests share a device up to that many times its
    capacity (1.2: 1200 milli of fractions per device). Quota and cost count the requested shares."""

    name: str
    node_selector: Labels = ()
    placement: str = ""  # "" = the policy's
    overcommit_ratio: float = 1.0


@dataclass(frozen=True, slots=True)
class GpuNode:
    """A schedulable node. Free capacity is derived from allocations, never stored here."""

    name: str
    gpu_model: str | None  # None for CPU-only nodes
    gpu_count: int
    cpu_milli: int
    memory_mib: int
    gpu_memory_gib: int = 0  # per device
    labels: Labels = ()
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False  # cordoned
    mig_enabled: bool = False  # devices are partitioned into MIG slices only
    # Fixed MIG partitions (the device plugin's mixed strategy): the slices that exist, (profile, count).
    # Empty on a MIG node: the engine chooses each instance's slot (dynamic partitioning).
    mig_slices: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class ReplicaPlacement:
    """Where one replica runs: a node and the GPU devices it holds there.

    ``gpu_milli`` is the share taken on each listed device (1000 for whole GPUs).
    ``mig_slot`` is the first memory slice of a MIG instance (device holds exactly one index then).
    """

    node: str
    gpu_indices: tuple[int, ...] = ()
    gpu_milli: int = 0
    mig_profile: str | None = None
    mig_slot: int | None = None
    cpu_milli: int = 0
    memory_mib: int = 0


@dataclass(frozen=True, slots=True)
class Resources:
    """Per-replica request. At most one of ``gpu``, ``gpu_milli``, ``mig_profile``, ``gpu_memory_gib``."""

    gpu: int = 0  # whole GPUs
    gpu_milli: int = 0  # fraction of one GPU, 1..999
    mig_profile: str | None = None
    gpu_memory_gib: int = 0  # converted to a whole-GPU count per model by the engine
    cpu_milli: int = 0
    memory_mib: int = 0

    @property
    def wants_gpu(self) -> bool:
        return bool(self.gpu or self.gpu_milli or self.mig_profile or self.gpu_memory_gib)


@dataclass(frozen=True, slots=True)
class PodSet:
    """A further group of identical pods admitted with a workload, in the same gang (a Ray cluster's
    worker group: the workload's own replicas are its head)."""

    name: str
    replicas: int
    resources: Resources


@dataclass(frozen=True, slots=True)
class Workload:
    """A job as the engine sees it: ``replicas`` identical pods, all-or-nothing down to ``min_available``.

    ``pod_sets`` are further groups of pods of other shapes, admitted with the workload's own pods as
    one gang (all of every set, or nothing; ``min_available`` is then 0), on the same GPU model: a Ray
    cluster's head (the workload's own replica) and its worker groups. Their placements follow the
    workload's own in the admission, set after set."""

    id: str
    local_queue: str
    team: str
    priority: int
    created_at: float
    resources: Resources
    replicas: int = 1
    min_available: int = 0  # 0 means all replicas (a full gang)
    preemptible: bool = True
    allowed_gpu_models: tuple[str, ...] = ()  # empty = any model
    node_selector: Labels = ()
    tolerations: tuple[Toleration, ...] = ()
    preferred_labels: tuple[tuple[str, str, int], ...] = ()  # (key, value, weight): key In [value]
    rules: PlacementRules | None = None  # affinity, anti-affinity, spread, one-domain gangs
    runtime_s: float = 3600.0  # requested runtime, for estimated start times
    start_window: StartWindow | None = None  # admitted only while open (``windows``)
    # Not preempted before it has run this long (its priority class's minimum runtime, KAI's preemption delay).
    min_runtime_s: float = 0.0
    state: WorkloadState = WorkloadState.PENDING
    gpu_model: str | None = None  # the flavor it was admitted on (admitted/running)
    placements: tuple[ReplicaPlacement, ...] = ()  # admitted/running
    started_at: float | None = None  # admitted/running
    pod_sets: tuple[PodSet, ...] = ()
    kind: str = ""  # the job's kind: "" (batch), "training", "inference", "ray"
    # Runs until stopped (an inference service's replica): no expected end, whatever ``runtime_s`` says.
    until_stopped: bool = False

    @property
    def gang_size(self) -> int:
        return self.min_available or self.replicas

    @property
    def wants_gpu(self) -> bool:
        """Whether any of its pods asks for a GPU (so it is admitted on a GPU model)."""
        return self.resources.wants_gpu or any(s.resources.wants_gpu for s in self.pod_sets)


@dataclass(frozen=True, slots=True)
class FlavorQuota:
    """Quota of one GPU model in a ClusterQueue (Kueue: a resource flavor). ``None`` limit = unlimited."""

    gpu_model: str
    nominal_gpus: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None


@dataclass(frozen=True, slots=True)
class ClusterQueue:
    name: str
    cohort: str = ""
    flavors: tuple[FlavorQuota, ...] = ()  # order = the order models are tried
    cpu_milli: int | None = None  # None = unlimited
    memory_mib: int | None = None
    weight: float = 1.0  # fair-share weight within its cohort
    cpu_borrowing_limit_milli: int | None = None  # None = may borrow any unused cohort CPU
    cpu_lending_limit_milli: int | None = None  # None = lends all unused nominal CPU
    memory_borrowing_limit_mib: int | None = None
    memory_lending_limit_mib: int | None = None


@dataclass(frozen=True, slots=True)
class LocalQueue:
    name: str
    team: str
    cluster_queue: str
    weight: float = 1.0
    max_pending: int | None = None


@dataclass(frozen=True, slots=True)
class ForeignUsage:
    """Capacity held by pods the portal did not create (system pods, other schedulers)."""

    node: str
    gpu_indices: tuple[int, ...] = ()
    gpu_milli: int = 1000
    cpu_milli: int = 0
    memory_mib: int = 0


@dataclass(frozen=True, slots=True)
class Policy:
    placement: str = "portal"  # fragmentation-aware; binpack | spread | fgd | random | dotprod | bestfit | ...
    pool_label: str = ""  # node label naming pools; per-pool placement overrides below
    pool_placement: tuple[tuple[str, str], ...] = ()
    rack_label: str = "topology.kubernetes.io/rack"
    zone_label: str = "topology.kubernetes.io/zone"
    nvlink_label: str = "nvidia.com/gpu.clique"  # NVLink domain (GPU feature discovery)
    preemption: bool = True
    seed: int = 0
    preemptors_per_queue: int = 1  # jobs per ClusterQueue that may choose victims in one cycle (Kueue: 1)
    # Decisions the forecast of estimated starts may take per run (Slurm's bf_max_job_test idea): jobs
    # it does not reach within them get no estimate (beyond the forecast's reach).
    forecast_decisions: int = 3000
    # An inference replica may preempt training jobs of strictly lower priority in any ClusterQueue
    # (not only its own): serving traffic before training throughput (``preemption``, kind "serving").
    inference_preempts_training: bool = False
    # Expected arrivals in the forecast: the last period's submissions (``Snapshot.recent``) recur
    # every period, for the horizon (0: the forecast expects no new submissions).
    arrival_period_s: float = 3600.0
    arrival_horizon_s: float = 6 * 3600.0
    # The P90 run expects each local queue's P90 count of submissions (``runtimes.upper_count``: the
    # last period's count is a sample, the rate behind it uncertain), not the last period's count again
    # (off, the default: measured in docs/engine.md, it did not bring more starts within the P90 estimate
    # on bench_estimate's seed 1 and made the P90 run cost more).
    arrival_upper_p90: bool = False
    # Backfill reservations (``reservations``, Slurm's backfill): the first this many jobs of a cycle's
    # order that wait for capacity hold the room they get at their forecast start; later jobs may use it
    # only if they are expected to end by then (0, the default: none; measured in docs/engine.md, they did
    # not make estimated starts better on bench_estimate's days).
    reserved_jobs: int = 0


@dataclass(frozen=True, slots=True)
class Snapshot:
    nodes: tuple[GpuNode, ...]
    cluster_queues: tuple[ClusterQueue, ...]
    local_queues: tuple[LocalQueue, ...]
    workloads: tuple[Workload, ...]  # pending, admitted and running
    foreign: tuple[ForeignUsage, ...] = ()
    teams_blocked: tuple[tuple[str, str], ...] = ()  # (team, why) — may not start new jobs
    mig_profiles: tuple[tuple[str, tuple[str, ...]], ...] = ()  # gpu_model -> supported profiles
    gpu_memory_gib: tuple[tuple[str, int], ...] = ()  # gpu_model -> memory per device
    pools: tuple[NodePool, ...] = ()  # in order: a node is in the first pool it matches
    # team -> the taints it may tolerate; None = no allow-list (every toleration counts)
    toleration_grants: tuple[tuple[str, tuple[TolerationGrant, ...]], ...] | None = None
    # workload id -> (P50, P90) expected runtime in the cluster's own seconds, for estimated starts
    # (from the team's history of similar jobs; a workload without one is expected to run runtime_s)
    runtimes: tuple[tuple[str, float, float], ...] = ()
    # running workload id -> (P50, P90) expected runtime given how long it has run (the team's runs that
    # lasted longer, ``runtimes.runtime_from_history``); its ``runtimes`` entry stays the plain figure,
    # which expected submissions repeating it run (``forecast_queue.Arrivals``)
    running_runtimes: tuple[tuple[str, float, float], ...] = ()
    # jobs submitted within ``Policy.arrival_period_s`` before now, in any state (finished too, with
    # their runtimes in ``runtimes``): the forecast expects their like again (``forecast_queue.Arrivals``)
    recent: tuple[Workload, ...] = ()


@dataclass(frozen=True, slots=True)
class Reason:
    """Why a workload did not start, with the numbers behind it.

    ``waits`` says whether waiting can help: True when what blocks the job is in use or scattered
    (quota in use, capacity in use, fragmentation, a budget hold, victims still stopping); False when
    the job never fits the cluster as configured (more than its queue's ceiling, a replica bigger than
    any node, a GPU model or MIG profile no node offers, an invalid request). ``details`` carries the
    limit's numbers in engine units (``limit`` names which one for a job that never fits,
    ``waits_for`` what it waits for otherwise).
    """

    kind: ReasonKind
    message: str
    details: tuple[tuple[str, int | float | str], ...] = ()
    waits: bool = True


@dataclass(frozen=True, slots=True)
class Admission:
    workload_id: str
    gpu_model: str | None
    placements: tuple[ReplicaPlacement, ...]
    borrowed: bool = False


@dataclass(frozen=True, slots=True)
class Preemption:
    workload_id: str
    preemptor_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class PendingInfo:
    workload_id: str
    reason: Reason
    position: int  # 1-based position in its local queue
    estimated_start: float | None = None  # P50; None = cannot estimate (never fits, blocked, horizon)
    estimated_start_p90: float | None = None


@dataclass(frozen=True, slots=True)
class Plan:
    admissions: tuple[Admission, ...] = ()
    preemptions: tuple[Preemption, ...] = ()
    pending: tuple[PendingInfo, ...] = ()
    stats: tuple[tuple[str, int | float], ...] = field(default=())
