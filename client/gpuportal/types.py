"""What the portal answers, as typed, immutable values.

Each value is read from the API's JSON with ``from_api``: fields the client knows become attributes
(times as aware ``datetime``, money and hours as exact ``Decimal``), anything else the portal adds
later stays readable in ``raw`` (the whole JSON object), so a newer portal never breaks an older client.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any, Literal, Self, TypedDict

TERMINAL_STATES = frozenset({"Succeeded", "Failed", "Cancelled"})
Verdict = Literal["runs_now", "waits", "never"]


class RayWorkerGroup(TypedDict, total=False):
    """One group of identical Ray workers (``name`` and ``replicas`` required)."""

    name: str
    replicas: int
    gpu: int  # whole GPUs per worker
    cpu_milli: int
    memory_mib: int


class RaySpec(TypedDict, total=False):
    """A Ray job beyond its head: a RayJob (``mode: job``, the default) runs ``entrypoint`` on a
    cluster of the head and ``worker_groups``, admitted as one gang; a RayCluster (``mode: cluster``)
    runs until cancelled."""

    mode: str
    entrypoint: str
    worker_groups: list[RayWorkerGroup]


class JobSpec(TypedDict, total=False):
    """The body of a submission (``POST /api/v1/jobs/``) and of a dry run; a plain ``dict`` works too.

    ``queue`` and ``image`` are required. Set at most one of ``gpu`` (whole GPUs per replica),
    ``gpu_milli`` (1-999 thousandths of one GPU), ``mig_profile`` (e.g. ``"3g.40gb"``) or
    ``gpu_memory_gib``. ``command`` is an argv list or a shell-like string.
    """

    name: str
    team: str
    namespace: str
    queue: str
    kind: str  # batch (default), training (a distributed gang with PyTorch's rendezvous variables) or ray
    image: str
    command: list[str] | str
    replicas: int
    min_available: int
    gpu: int
    gpu_milli: int
    mig_profile: str
    gpu_memory_gib: int
    cpu_milli: int
    memory_mib: int
    allowed_gpu_models: list[str]
    priority_class: str
    runtime_s: int
    restart_policy: str
    node_selector: dict[str, str]
    tolerations: list[dict[str, str]]
    affinity: dict[str, Any]  # a pod spec's affinity: nodeAffinity, podAntiAffinity (between replicas)
    topology_spread_constraints: list[dict[str, Any]]  # a pod spec's, over the job's replicas
    required_topology: str  # node, rack, zone, nvlink or a node label: every replica in one domain
    labels: dict[str, str]
    checkpoint_path: str  # passed to the pods as CHECKPOINT_PATH; named in preemption and spot notices
    max_restarts: int  # training: whole-gang restarts after a worker fails, then the job fails
    spot: bool  # may run on spot nodes (spot price); requeued when the node is reclaimed
    start_after: str  # ISO 8601: not admitted before this instant
    start_window: str  # e.g. "20:00-08:00": admitted only between these local times
    window_timezone: str  # IANA zone of start_window (default UTC)
    off_peak: bool  # starts only in the portal's off-peak hours, billed at the off-peak price
    ray: RaySpec  # kind ray: mode, entrypoint and worker groups (the job's own resources are the head's)


def parse_time(value: Any) -> datetime | None:
    """An ISO 8601 time from the API (``Z`` included) as an aware datetime; None when absent."""
    if not value:
        return None
    if isinstance(value, datetime):
        return value
    text = str(value)
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def parse_decimal(value: Any) -> Decimal | None:
    """A number (JSON number or decimal string) as an exact Decimal; None when absent or not a number."""
    if value is None or value == "" or isinstance(value, bool):
        return None
    try:
        return Decimal(str(value))
    except (InvalidOperation, ValueError):
        return None


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


# How a field is read from JSON, by its annotation (the module's annotations are strings).
PARSERS: dict[str, Callable[[Any], Any]] = {
    "str": lambda v: "" if v is None else str(v),
    "str | None": lambda v: str(v) if v else None,
    "int": _int,
    "int | None": lambda v: None if v is None or v == "" else _int(v),
    "bool": bool,
    "bool | None": lambda v: v if isinstance(v, bool) else None,
    "datetime | None": parse_time,
    "Decimal": lambda v: parse_decimal(v) or Decimal(0),
    "Decimal | None": parse_decimal,
    "Mapping[str, Any]": _mapping,
    "tuple[str, ...]": lambda v: tuple("" if x is None else str(x) for x in _list(v)),
    "tuple[int, ...]": lambda v: tuple(_int(x) for x in _list(v)),
    "float | None": lambda v: None if parse_decimal(v) is None else float(v),
}


class ApiValue:
    """``from_api`` for the dataclasses below: each field read from the JSON key of its name (or the
    ``sources`` in its metadata, first present wins) by its ``parse`` metadata or its annotation's
    parser; ``raw`` keeps the whole object."""

    __slots__ = ()

    @classmethod
    def from_api(cls, data: Any) -> Self:
        data = _mapping(data)
        values: dict[str, Any] = {}
        for item in fields(cls):  # type: ignore[arg-type]  # every subclass is a dataclass
            if item.name == "raw":
                values["raw"] = data
                continue
            sources = item.metadata.get("sources", (item.name,))
            value = next((data[key] for key in sources if data.get(key) is not None), None)
            parse = item.metadata.get("parse") or PARSERS[str(item.type)]
            values[item.name] = parse(value)
        return cls(**values)

    @classmethod
    def optional(cls, data: Any) -> Self | None:
        """``from_api``, or None for an absent or empty object."""
        return cls.from_api(data) if data else None

    @classmethod
    def many(cls, data: Any) -> tuple[Self, ...]:
        """A JSON list of objects as a tuple of values."""
        return tuple(cls.from_api(x) for x in _list(data))


def _raw() -> Any:
    return field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class Reason(ApiValue):
    """Why a job waits or cannot run: a kind (e.g. ``quota``, ``capacity``), a sentence, the numbers."""

    kind: str
    message: str
    details: Mapping[str, Any]
    waits: bool | None  # the dry run says whether the reason only delays the job
    raw: Mapping[str, Any] = _raw()


@dataclass(frozen=True, slots=True)
class Placement(ApiValue):
    """Where one replica runs (or would run): node, GPU devices, share or MIG slice."""

    replica: int | None
    node: str
    gpu_indices: tuple[int, ...] = field(metadata={"sources": ("gpu_indices", "gpus")})
    gpu_milli: int = 0
    mig_profile: str = ""
    mig_slot: int | None = None
    cpu_milli: int = 0
    memory_mib: int = 0
    raw: Mapping[str, Any] = _raw()

    def describe(self) -> str:
        """``a100-0 GPUs 0,1`` / ``a100-0 GPU 3 (250 milli)`` / ``a100-1 MIG 3g.40gb slot 4``."""
        text = self.node or "?"
        if self.mig_profile:
            slot = f" slot {self.mig_slot}" if self.mig_slot is not None else ""
            return f"{text} MIG {self.mig_profile}{slot}"
        if self.gpu_indices:
            label = "GPU" if len(self.gpu_indices) == 1 else "GPUs"
            text += f" {label} {','.join(map(str, self.gpu_indices))}"
        if self.gpu_milli:
            text += f" ({self.gpu_milli} milli)"
        return text


@dataclass(frozen=True, slots=True)
class Transition(ApiValue):
    from_state: str
    to_state: str
    at: datetime | None
    reason: str
    actor: str
    raw: Mapping[str, Any] = _raw()


@dataclass(frozen=True, slots=True)
class Attempt(ApiValue):
    """One admission of a job (a requeued job has several): where and when it ran, how it ended, and
    its run time, GPU-hours, cost so far and estimated total."""

    number: int
    queued_at: datetime | None
    admitted_at: datetime | None
    started_at: datetime | None
    ended_at: datetime | None
    outcome: str
    end_reason: str
    gpu_model: str
    capacity_type: str
    gpus: Decimal
    nodes: tuple[str, ...]
    placements: tuple[Placement, ...] = field(default=(), metadata={"parse": Placement.many})
    run_s: float | None = None
    gpu_hours: Decimal | None = None
    cost_usd: Decimal | None = None
    estimated_total_usd: Decimal | None = None
    raw: Mapping[str, Any] = _raw()


@dataclass(frozen=True, slots=True)
class Job(ApiValue):
    """A job as the portal reports it (``GET /api/v1/jobs/<id>/``)."""

    id: int
    name: str
    state: str
    team: str
    namespace: str
    queue: str
    owner: str
    kind: str
    image: str
    command: tuple[str, ...]
    replicas: int = field(metadata={"parse": lambda v: _int(v, 1)})
    gpu: int = 0
    gpu_milli: int = 0
    mig_profile: str = ""
    gpu_memory_gib: int = 0
    cpu_milli: int = 0
    memory_mib: int = 0
    runtime_s: int = 0
    priority_class: str = ""
    message: str = ""
    created_at: datetime | None = None
    admitted_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    attempt: int = 0
    gpu_model: str | None = None
    capacity_type: str = ""
    checkpoint_path: str = ""
    spot: bool = False
    max_restarts: int = 0
    restarts: int = 0  # whole-gang restarts of a training job so far
    pending_reason: Reason | None = field(default=None, metadata={"parse": Reason.optional})
    queue_position: int | None = None
    estimated_start: datetime | None = None  # P50
    estimated_start_p90: datetime | None = None
    estimate_note: str = ""  # why there is no estimated start: never, horizon or budget
    placements: tuple[Placement, ...] = field(default=(), metadata={"parse": Placement.many})
    transitions: tuple[Transition, ...] = field(default=(), metadata={"parse": Transition.many})
    # Run time and money over every attempt, running ones up to now (None from a portal without them).
    run_s: float | None = None
    gpu_hours: Decimal | None = None
    cost_usd: Decimal | None = None
    estimated_total_usd: Decimal | None = None  # None while it waits for an admission
    attempts: tuple[Attempt, ...] = field(default=(), metadata={"parse": Attempt.many})
    raw: Mapping[str, Any] = _raw()

    @property
    def check(self) -> Check | None:
        """A submission's answer carries the dry run of its spec just before it was queued."""
        return Check.optional(self.raw.get("check"))

    @property
    def done(self) -> bool:
        """Finished: Succeeded, Failed or Cancelled (a preempted job is requeued, not done)."""
        return self.state in TERMINAL_STATES

    @property
    def succeeded(self) -> bool:
        return self.state == "Succeeded"

    @property
    def ray(self) -> Mapping[str, Any]:
        """A Ray job's mode, entrypoint and worker groups (empty for other kinds)."""
        return self.raw.get("ray") or {}

    @property
    def expected_end(self) -> datetime | None:
        """When a running job is expected to end, if the portal says (``expected_end``)."""
        return parse_time(self.raw.get("expected_end") or self.raw.get("estimated_end"))


@dataclass(frozen=True, slots=True)
class Cost(ApiValue):
    """An estimated cost (a dry run's ``cost``): GPU-hours × the effective price, CPU and memory too."""

    gpu_hours: Decimal
    gpu_usd: Decimal
    cpu_usd: Decimal
    memory_usd: Decimal
    total_usd: Decimal
    price_per_gpu_hour: Decimal | None
    capacity_type: str
    currency: str = field(metadata={"parse": lambda v: str(v) if v else "USD"})
    gpu_model: str | None = None
    runtime_s: float | None = None  # the expected runtime it is priced for
    per_hour: bool = False  # one hour of a job that runs until stopped (an inference replica): no end to price to
    priced_at: datetime | None = None
    raw: Mapping[str, Any] = _raw()


@dataclass(frozen=True, slots=True)
class Suggestion(ApiValue):
    """A change to the spec that makes the job start sooner (another GPU model, a fraction, …): in
    words, as spec fields to change, and what the dry run answers for the changed spec."""

    message: str
    change: Mapping[str, Any]
    verdict: str = ""
    estimated_start: datetime | None = field(
        default=None, metadata={"sources": ("estimated_start", "estimated_start_p50")}
    )
    raw: Mapping[str, Any] = _raw()

    @staticmethod
    def sentences_or_objects(value: Any) -> tuple[Suggestion, ...]:
        """Suggestions as objects (the words under ``message`` or ``change``, the fields under
        ``spec_patch``, ``patch``, ``spec`` or ``change``; the answer flat or under ``answer``), or as
        plain sentences."""
        out = []
        for item in _list(value):
            data: dict[str, Any] = {"message": item} if isinstance(item, str) else dict(_mapping(item))
            answer = _mapping(data.get("answer"))
            words = next((data[k] for k in ("message", "change", "description") if isinstance(data.get(k), str)), "")
            patch: Mapping[str, Any] = next(
                (data[k] for k in ("spec_patch", "patch", "spec", "change") if isinstance(data.get(k), Mapping)), {}
            )
            flat = {**answer, **data, "message": words, "change": patch}
            out.append(replace(Suggestion.from_api(flat), raw=data))
        return tuple(out)


@dataclass(frozen=True, slots=True)
class Victim(ApiValue):
    """A job a dry run would preempt: named when it is one of your teams' (``job``, ``name``, ``team``),
    else only counted (``job`` None, ``count`` of other teams' jobs)."""

    job: int | None
    name: str
    team: str
    count: int = field(metadata={"parse": lambda v: _int(v, 1)})
    raw: Mapping[str, Any] = _raw()

    @staticmethod
    def ids_or_objects(value: Any) -> tuple[Victim, ...]:
        return tuple(Victim.from_api(x if isinstance(x, Mapping) else {"job": x}) for x in _list(value))


@dataclass(frozen=True, slots=True)
class Check(ApiValue):
    """A dry run's answer (``POST /api/v1/jobs/check/``): will it run, when, at what cost."""

    verdict: str  # runs_now, waits or never
    gpu_model: str | None
    placements: tuple[Placement, ...] = field(default=(), metadata={"parse": Placement.many})
    position: int | None = None
    reason: Reason | None = field(default=None, metadata={"parse": Reason.optional})
    estimated_start_p50: datetime | None = None
    estimated_start_p90: datetime | None = None
    no_estimate: Reason | None = field(default=None, metadata={"parse": Reason.optional})  # why no start
    preempts: tuple[Victim, ...] = field(default=(), metadata={"parse": Victim.ids_or_objects})
    cost: Cost | None = field(default=None, metadata={"parse": Cost.optional})
    suggestions: tuple[Suggestion, ...] = field(default=(), metadata={"parse": Suggestion.sentences_or_objects})
    as_of: datetime | None = None  # the state the answer was computed on
    runtime_s: float | None = None  # the expected runtime it assumed, in the cluster's seconds
    raw: Mapping[str, Any] = _raw()

    @property
    def runs_now(self) -> bool:
        return self.verdict == "runs_now"

    @property
    def waits(self) -> bool:
        return self.verdict == "waits"

    @property
    def never(self) -> bool:
        return self.verdict == "never"


@dataclass(frozen=True, slots=True)
class RunCost(ApiValue):
    """One attempt of a job that ran, and what it cost."""

    attempt: int
    start: datetime | None
    end: datetime | None  # None while it runs
    running: bool
    outcome: str
    gpu_model: str
    capacity_type: str
    gpus: Decimal
    price_per_gpu_hour: Decimal | None
    gpu_hours: Decimal
    gpu_usd: Decimal
    cpu_usd: Decimal
    memory_usd: Decimal
    total_usd: Decimal
    run_s: float | None = None
    estimated_total_usd: Decimal | None = None  # its cost up to its expected end
    raw: Mapping[str, Any] = _raw()


@dataclass(frozen=True, slots=True)
class JobCost(ApiValue):
    """What a job cost so far (``GET /api/v1/jobs/<id>/cost/``), run by run and in total."""

    job: int
    as_of: datetime | None
    currency: str = field(metadata={"parse": lambda v: str(v) if v else "USD"})
    gpu_hours: Decimal = Decimal(0)
    gpu_usd: Decimal = Decimal(0)
    cpu_core_hours: Decimal = Decimal(0)
    cpu_usd: Decimal = Decimal(0)
    memory_gib_hours: Decimal = Decimal(0)
    memory_usd: Decimal = Decimal(0)
    total_usd: Decimal = Decimal(0)
    run_s: float | None = None
    estimated_total_usd: Decimal | None = None  # None while it waits for an admission
    runs: tuple[RunCost, ...] = field(default=(), metadata={"parse": RunCost.many})
    raw: Mapping[str, Any] = _raw()

    @property
    def running(self) -> bool:
        """The job still runs: the figures grow until it ends."""
        return any(run.running for run in self.runs)


@dataclass(frozen=True, slots=True)
class ScheduledRun(ApiValue):
    """One instant a schedule fired: submitted (``job`` is its id), skipped or refused (``message``)."""

    run_at: datetime | None
    fired_at: datetime | None
    outcome: str
    message: str
    job: int | None
    job_state: str | None
    raw: Mapping[str, Any] = _raw()


@dataclass(frozen=True, slots=True)
class Schedule(ApiValue):
    """A job submitted at each instant of a cron expression in a time zone (``/api/v1/schedules/``)."""

    id: int
    name: str
    team: str
    queue: str
    owner: str
    cron: str
    timezone: str
    concurrency_policy: str
    enabled: bool
    next_run_at: datetime | None
    missed_runs: int
    job: Mapping[str, Any]
    recent_runs: tuple[ScheduledRun, ...] = field(default=(), metadata={"parse": ScheduledRun.many})
    raw: Mapping[str, Any] = _raw()


@dataclass(frozen=True, slots=True)
class ServiceSample(ApiValue):
    """One autoscaler pass: the load read, replicas running and active, recommended and desired."""

    at: datetime | None
    load: float | None
    running: int
    active: int
    recommended: int
    desired: int
    source: str
    raw: Mapping[str, Any] = _raw()


@dataclass(frozen=True, slots=True)
class InferenceService(ApiValue):
    """A model server that runs until stopped (``/api/v1/services/``); each replica is a queued job."""

    id: int
    name: str
    team: str
    queue: str
    state: str
    model_family: str
    model_size_b: int | None
    gpu_memory_gib: int
    min_replicas: int
    max_replicas: int
    metric: str
    desired_replicas: int
    replica_hours: Decimal
    gpu_hours: Decimal
    cost_usd: Decimal
    raw: Mapping[str, Any] = _raw()
