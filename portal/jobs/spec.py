"""A job request (``JobSpec``) and its rules: every field bounded, every key checked as Kubernetes checks
it, the never-fits 400 on the field to change. ``portal.jobs.services`` submits what passes."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from datetime import datetime
from typing import Any

from django.conf import settings

from portal.jobs.errors import ServiceError
from portal.jobs.images import image_reference_problem
from portal.jobs.models import (
    GpuModel,
    Job,
    LocalQueue,
    PriorityClass,
)
from portal.tenants.models import Team
from portal.tenants.selectors import team_toleration_allowlist
from portal.tenants.tolerations import toleration_allowed, toleration_text
from scheduling.adapters.k8s.affinity import RulesError, parse_rules
from scheduling.adapters.k8s.pods import valid_label
from scheduling.adapters.k8s.ray import RaySpecError, ray_spec_check
from scheduling.engine.codec import reason_to_json
from scheduling.engine.model import Reason
from scheduling.engine.windows import parse_span, zone_problem

MAX_GPUS_PER_REPLICA = 64
MAX_REPLICAS = 1024
MAX_CPU_MILLI = 1024 * 1000
MAX_MEMORY_MIB = 16 * 1024 * 1024  # 16 TiB
MAX_GPU_MEMORY_GIB = 8 * 1024
MAX_RUNTIME_S = 90 * 24 * 3600
MAX_RESTARTS = 100
MIG_PROFILE_RE = re.compile(r"^[1-7]g\.\d+gb(\+me)?$")  # +me: media extensions, a profile of its own
# Every list and string of a spec is bounded, so one tenant's request cannot make the cycle (which
# reads every pending job) slower for everyone: the largest legal job costs the same as a small one.
MAX_LABELS = 32  # labels never reach the cycle (it does not load them)
MAX_NODE_SELECTOR = 16  # the cycle matches these against every node
MAX_TOLERATIONS = 16  # and these against every tainted node
MAX_COMMAND_ARGS = 256
MAX_COMMAND_ARG_CHARS = 4096
MAX_COMMAND_CHARS = 32 * 1024
MAX_ALLOWED_GPU_MODELS = 32
TOLERATION_OPERATORS = ("Equal", "Exists")
TOLERATION_EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")
TOLERATION_FIELDS = frozenset({"key", "operator", "value", "effect"})


def label_problem(key: str, value: str) -> str | None:
    """Why ``key=value`` is not a valid Kubernetes label (None when it is).

    The pod builder's own check decides, so a label accepted here is one the job's pods carry.
    """
    if not valid_label(key, ""):
        return f"{key!r} is not a valid label key (an optional DNS prefix and '/', then 1-63 of [A-Za-z0-9-_.])"
    if not valid_label(key, value):
        return f"value {value!r} of {key!r} is not a valid label value (0-63 of [A-Za-z0-9-_.])"
    return None


def toleration_problem(toleration: Mapping[str, Any]) -> str | None:
    """Why a toleration is not one Kubernetes accepts (its ValidateTolerations rules), None if it is.

    The key is a qualified name (as a label key), an empty key needs ``Exists``, ``Exists`` takes no
    value, an ``Equal`` value is a label value, and the effect is one of Kubernetes' three (or empty)."""
    if not isinstance(toleration, Mapping):
        return "a toleration is an object with key, operator, value and effect"
    if unknown := sorted(set(toleration) - TOLERATION_FIELDS):
        return f"unknown toleration field {unknown[0]!r} (key, operator, value, effect)"
    key, operator = toleration.get("key", ""), toleration.get("operator", "Equal") or "Equal"
    value, effect = toleration.get("value", ""), toleration.get("effect", "")
    if not all(isinstance(v, str) for v in (key, operator, value, effect)):
        return "key, operator, value and effect are strings"
    if operator not in TOLERATION_OPERATORS:
        return f"operator {operator!r} is not Equal or Exists"
    if effect not in TOLERATION_EFFECTS:
        return f"effect {effect!r} is not NoSchedule, PreferNoSchedule or NoExecute"
    if key and not valid_label(key, ""):
        return f"key {key!r} is not a qualified name (an optional DNS prefix and '/', then 1-63 of [A-Za-z0-9-_.])"
    if not key and operator != "Exists":
        return "a toleration without a key must use operator Exists"
    if operator == "Exists" and value:
        return f"operator Exists takes no value (got {value!r})"
    if value and not valid_label("k", value):
        return f"value {value!r} is not a label value (0-63 of [A-Za-z0-9-_.])"
    return None


def command_problem(command: tuple[str, ...]) -> str | None:
    if len(command) > MAX_COMMAND_ARGS:
        return f"at most {MAX_COMMAND_ARGS} arguments (got {len(command)})"
    total = 0
    for index, arg in enumerate(command):
        if not isinstance(arg, str):
            return f"argument {index} is not a string"
        if len(arg) > MAX_COMMAND_ARG_CHARS:
            return f"argument {index} is longer than {MAX_COMMAND_ARG_CHARS} characters"
        if "\x00" in arg:
            return f"argument {index} holds a NUL character"
        total += len(arg)
    if total > MAX_COMMAND_CHARS:
        return f"longer than {MAX_COMMAND_CHARS} characters in all"
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSpec:
    """A validated-shape job request (types checked by the serializer/form, rules checked here).

    Its fields, in this order, are the one list of what a job request holds (``SPEC_FIELDS``)."""

    team: Team
    local_queue: LocalQueue
    name: str = ""
    kind: str = Job.Kind.BATCH
    image: str
    command: tuple[str, ...] = ()
    replicas: int = 1
    min_available: int = 0
    gpu: int = 0
    gpu_milli: int = 0
    mig_profile: str = ""
    gpu_memory_gib: int = 0
    cpu_milli: int = 1000
    memory_mib: int = 4096
    allowed_gpu_models: tuple[GpuModel, ...] = ()
    priority_class: PriorityClass
    runtime_s: int = 3600
    restart_policy: str = Job.RestartPolicy.REQUEUE
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[dict, ...] = ()
    affinity: dict = field(default_factory=dict)
    topology_spread_constraints: tuple[dict, ...] = ()
    required_topology: str = ""
    labels: tuple[tuple[str, str], ...] = ()
    checkpoint_path: str = ""
    max_restarts: int = 3
    spot: bool = False
    start_after: datetime | None = None
    start_window: str = ""
    window_timezone: str = "UTC"
    off_peak: bool = False
    ray: dict = field(default_factory=dict)

    @classmethod
    def from_values(cls, values: Mapping[str, Any], **objects: Any) -> JobSpec:
        """A spec from plain values (lists and dicts as the API and forms give them) plus the looked-up
        rows in ``objects`` (team, local_queue, priority_class, allowed_gpu_models)."""
        spec: dict[str, Any] = {}
        for name in SPEC_FIELDS:
            if name in objects:
                spec[name] = objects[name]
            elif name in values:
                value = values[name]
                if name in _PAIR_FIELDS:
                    value = tuple(sorted(dict(value or {}).items()))
                elif name in _LIST_FIELDS:
                    value = tuple(dict(v) if isinstance(v, Mapping) else v for v in value or ())
                spec[name] = value
        return cls(**spec)

    def row(self) -> dict[str, Any]:
        """The ``Job`` column values of this spec (``allowed_gpu_models`` is a relation, set apart)."""
        values: dict[str, Any] = {}
        for name in SPEC_FIELDS:
            value = getattr(self, name)
            if name == "allowed_gpu_models":
                continue
            if name in _PAIR_FIELDS:
                value = dict(value)
            elif name in _LIST_FIELDS:
                value = list(value)
            values[name] = value
        values["image"] = self.image.strip()
        return values


SPEC_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclass_fields(JobSpec))
"""The fields of a job request, in one place: the submit service, the API's submit and read shapes
and the form are built from (and tested against) this list."""
_PAIR_FIELDS = frozenset({"node_selector", "labels"})  # dicts, kept as sorted pairs
_LIST_FIELDS = frozenset({"command", "tolerations", "allowed_gpu_models", "topology_spread_constraints"})


def job_spec_validate(spec: JobSpec) -> None:
    """Business rules for a job request. Raises ServiceError naming the field at fault."""
    if problem := image_reference_problem(spec.image.strip()):
        raise ServiceError(problem, field="image")
    if spec.local_queue.team_id != spec.team.pk:
        raise ServiceError(
            f"queue {spec.local_queue.name!r} belongs to team {spec.local_queue.team.slug!r}, not {spec.team.slug!r}",
            field="queue",
        )
    if not 1 <= spec.replicas <= MAX_REPLICAS:
        raise ServiceError(f"must be between 1 and {MAX_REPLICAS}", field="replicas")
    if spec.min_available > spec.replicas:
        raise ServiceError(f"{spec.min_available} exceeds replicas ({spec.replicas})", field="min_available")
    if spec.min_available < 0:
        raise ServiceError("must not be negative", field="min_available")
    resources_validate(spec)
    for field_name, pairs, most in (
        ("labels", spec.labels, MAX_LABELS),
        ("node_selector", spec.node_selector, MAX_NODE_SELECTOR),
    ):
        if len(pairs) > most:
            raise ServiceError(f"at most {most} entries", field=field_name)
        for key, value in pairs:
            if problem := label_problem(key, value):
                raise ServiceError(problem, field=field_name)
    if not 1 <= spec.runtime_s <= MAX_RUNTIME_S:
        raise ServiceError(f"must be between 1 s and {MAX_RUNTIME_S} s (90 days)", field="runtime_s")
    if problem := command_problem(spec.command):
        raise ServiceError(problem, field="command")
    if len(spec.allowed_gpu_models) > MAX_ALLOWED_GPU_MODELS:
        raise ServiceError(f"at most {MAX_ALLOWED_GPU_MODELS} GPU models", field="allowed_gpu_models")
    tolerations_validate(spec)
    placement_rules_validate(spec)
    start_window_validate(spec)
    kind_validate(spec)


def start_window_validate(spec: JobSpec) -> None:
    """A daily span like 20:00-08:00 in a known zone, or the off-peak hours, not both."""
    if spec.off_peak and spec.start_window:
        raise ServiceError(
            f"an off-peak job starts in the off-peak hours ({settings.OFFPEAK_HOURS}); leave start_window empty",
            field="start_window",
        )
    if spec.start_window:
        try:
            parse_span(spec.start_window)
        except ValueError as exc:
            raise ServiceError(str(exc), field="start_window") from None
    if problem := zone_problem(spec.window_timezone):
        raise ServiceError(problem, field="window_timezone")


def kind_validate(spec: JobSpec) -> None:
    """What each kind of job asks of its spec (docs/workloads.md)."""
    if spec.kind == Job.Kind.TRAINING and spec.min_available not in (0, spec.replicas):
        raise ServiceError(
            f"a training job's workers start together or not at all: set 0 (all {spec.replicas}) or leave it out",
            field="min_available",
        )
    ray_validate(spec)
    if not 0 <= spec.max_restarts <= MAX_RESTARTS:
        raise ServiceError(f"must be between 0 and {MAX_RESTARTS}", field="max_restarts")
    path = spec.checkpoint_path
    if len(path) > 1024:
        raise ServiceError("at most 1024 characters", field="checkpoint_path")
    if any(ch in path for ch in "\x00\n\r"):
        raise ServiceError("must not contain NUL or line breaks", field="checkpoint_path")


def ray_validate(spec: JobSpec) -> None:
    """A Ray job's head (its own pod) and worker groups (``scheduling.adapters.k8s.ray``); only a Ray
    job takes ``ray``."""
    if spec.kind != Job.Kind.RAY:
        if spec.ray:
            raise ServiceError("only a Ray job (kind ray) takes ray", field="ray")
        return
    fractional = next((name for name in ("gpu_milli", "mig_profile", "gpu_memory_gib") if getattr(spec, name)), "")
    try:
        ray_spec_check(spec.ray, replicas=spec.replicas, min_available=spec.min_available, fractional=fractional)
    except RaySpecError as exc:
        raise ServiceError(exc.message, field=exc.field) from None


def placement_rules_validate(spec: JobSpec) -> None:
    """Node affinity, pod anti-affinity, topology spread and the one-domain level, as Kubernetes
    validates them and within the portal's bounds (``scheduling.adapters.k8s.affinity``)."""
    try:
        parse_rules(spec.affinity, list(spec.topology_spread_constraints), spec.required_topology)
    except RulesError as exc:
        raise ServiceError(exc.message, field=exc.field) from None


GPU_REQUEST_WORDS = {
    "gpu": "whole GPUs",
    "gpu_milli": "a GPU fraction",
    "mig_profile": "a MIG profile",
    "gpu_memory_gib": "GPU memory",
}


def resources_validate(spec: JobSpec) -> None:
    """One kind of GPU request at most, each within its range; CPU and memory within theirs."""
    gpu_kinds = [
        name
        for name, value in (
            ("gpu", spec.gpu),
            ("gpu_milli", spec.gpu_milli),
            ("mig_profile", spec.mig_profile),
            ("gpu_memory_gib", spec.gpu_memory_gib),
        )
        if value
    ]
    if len(gpu_kinds) > 1:
        chosen = " and ".join(GPU_REQUEST_WORDS[kind] for kind in gpu_kinds)
        raise ServiceError(
            f"set only one of whole GPUs, a GPU fraction, a MIG profile or GPU memory (this request sets {chosen})",
            field=gpu_kinds[1],
        )
    if spec.gpu < 0 or spec.gpu > MAX_GPUS_PER_REPLICA:
        raise ServiceError(f"must be between 0 and {MAX_GPUS_PER_REPLICA} whole GPUs per replica", field="gpu")
    if spec.gpu_milli < 0 or spec.gpu_milli >= 1000:
        raise ServiceError("a GPU fraction is 1..999 thousandths of one GPU; use gpu for whole GPUs", field="gpu_milli")
    if spec.gpu_memory_gib < 0 or spec.gpu_memory_gib > MAX_GPU_MEMORY_GIB:
        raise ServiceError(f"must be between 0 and {MAX_GPU_MEMORY_GIB} GiB", field="gpu_memory_gib")
    if spec.mig_profile:
        if not MIG_PROFILE_RE.match(spec.mig_profile):
            raise ServiceError(f"{spec.mig_profile!r} is not a MIG profile like 1g.10gb", field="mig_profile")
        candidates = spec.allowed_gpu_models or tuple(GpuModel.objects.all())
        if not any(spec.mig_profile in (m.mig_profiles or []) for m in candidates):
            raise ServiceError(f"no allowed GPU model supports MIG profile {spec.mig_profile}", field="mig_profile")
    if not 1 <= spec.cpu_milli <= MAX_CPU_MILLI:
        raise ServiceError(f"must be between 1 and {MAX_CPU_MILLI} milli-CPU", field="cpu_milli")
    if not 1 <= spec.memory_mib <= MAX_MEMORY_MIB:
        raise ServiceError(f"must be between 1 and {MAX_MEMORY_MIB} MiB", field="memory_mib")


def tolerations_validate(spec: JobSpec) -> None:
    """Kubernetes' syntax for each toleration, then the team's allow-list (platform admins grant the
    taints a team may tolerate; anything else is refused, naming the toleration)."""
    if len(spec.tolerations) > MAX_TOLERATIONS:
        raise ServiceError(f"at most {MAX_TOLERATIONS} tolerations (got {len(spec.tolerations)})", field="tolerations")
    for index, toleration in enumerate(spec.tolerations):
        if problem := toleration_problem(toleration):
            raise ServiceError(f"toleration {index}: {problem}", field="tolerations")
    if not spec.tolerations:
        return
    grants = team_toleration_allowlist(team_slugs=[spec.team.slug]).get(spec.team.slug, ())
    for toleration in spec.tolerations:
        if not toleration_allowed(toleration, grants):
            raise ServiceError(
                f"toleration {toleration_text(toleration)} is not allowed for team {spec.team.slug!r}: platform "
                "admins list the taints a team may tolerate",
                field="tolerations",
            )


def never_fits_error(reason: Reason, spec: JobSpec) -> ServiceError:
    """The 400 for a job that never fits as configured: the engine's reason, on the field to change."""
    details = dict(reason.details)
    limit, resource = details.get("limit"), str(details.get("resource", ""))
    field: str | None
    gpu_field = next(
        (name for name in ("gpu", "gpu_milli", "mig_profile", "gpu_memory_gib") if getattr(spec, name)), "gpu"
    )
    if limit in ("queue_ceiling", "largest_node"):
        field = {"cpu": "cpu_milli", "memory": "memory_mib"}.get(resource, gpu_field)
    elif limit == "cluster_total":
        field = "min_available" if spec.min_available else "replicas"
    elif limit in ("catalogue", "mig_partition"):
        field = gpu_field
    elif limit in ("no_quota", "absent_model"):
        field = "allowed_gpu_models" if spec.allowed_gpu_models else "queue"
    elif limit == "one_domain":
        field = "required_topology"
    elif limit == "anti_affinity":
        field = "affinity"
    else:  # node filters: the first filter that refuses the most nodes
        first = next((key for key in details if key not in ("limit", "nodes")), "")
        field = {"node selector does not match": "node_selector", "untolerated taint": "tolerations"}.get(
            first, gpu_field if first.startswith("MIG") else None
        )
        if first.startswith("not matching node affinity"):
            field = "affinity"
        elif first.startswith("without the label"):  # a one-domain level's or a spread constraint's
            field = "required_topology" if spec.required_topology else "topology_spread_constraints"
    if spec.kind == Job.Kind.RAY and reason.message.startswith("pod set "):  # a worker group's (podsets)
        name = reason.message.removeprefix("pod set ").split(":", 1)[0]
        groups = [str(g.get("name")) for g in spec.ray.get("worker_groups") or ()]
        part = {"cpu_milli": "cpu_milli", "memory_mib": "memory_mib"}.get(str(field), "gpu")
        field = f"ray.worker_groups.{groups.index(name)}.{part}" if name in groups else "ray.worker_groups"
    error = ServiceError(reason.message, field=field)
    error.reason = reason_to_json(reason)
    return error
