"""Writes that touch jobs and queues. Views, serializers, tasks and the admin call these; they hold the rules."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from datetime import datetime, timedelta
from functools import partial
from types import EllipsisType
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from billing.selectors.jobs import PlannedCost, planned_cost
from portal.jobs.errors import BROKER_ERRORS, ServiceError
from portal.jobs.images import image_reference_problem
from portal.jobs.models import (
    ClusterQueue,
    FlavorQuota,
    GpuModel,
    IdempotencyKey,
    Job,
    JobTransition,
    LocalQueue,
    PriorityClass,
    QuotaChange,
)
from portal.jobs.states import ACTIVE_STATES, CANCELLABLE_STATES, FINAL_STATES, IllegalTransition, JobState
from portal.jobs.transitions import job_transition
from portal.ops.models import AuditEntry
from portal.ops.services import audit_record
from portal.tenants.models import Team
from portal.tenants.selectors import team_toleration_allowlist, user_is_team_admin
from portal.tenants.tolerations import toleration_allowed, toleration_text
from scheduling.adapters.factory import cluster_backend
from scheduling.adapters.k8s.affinity import RulesError, parse_rules
from scheduling.adapters.k8s.pods import valid_label
from scheduling.adapters.k8s.ray import RaySpecError, ray_spec_check
from scheduling.adapters.orm import workload_from_request
from scheduling.engine import model as engine
from scheduling.engine.admission import pending_limit_error
from scheduling.engine.codec import reason_to_json
from scheduling.engine.model import LocalQueue as EngineLocalQueue
from scheduling.engine.model import Reason
from scheduling.engine.quota import models_to_try
from scheduling.engine.shares import billed_units, placement_billed_units
from scheduling.engine.windows import parse_span, zone_problem
from scheduling.selectors import JobCheck, job_check, job_never_fits
from scheduling.services import cycle_request_claim
from scheduling.tasks import scheduling_cycle_task

logger = logging.getLogger(__name__)

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


def job_submit(*, owner, spec: JobSpec, at: datetime | None = None, request_cycle: bool = True) -> Job:
    """Create a Pending job, enforcing the local queue's max pending jobs, and schedule a cycle.

    A job that never fits the cluster as configured (``scheduling.engine.verdict``) is refused with a
    400 naming the limit, unless ``QUEUE_NEVER_FITTING_JOBS`` lets it queue (clusters that autoscale).
    The queue row is locked so two concurrent submissions cannot both take the last pending slot.
    """
    job_spec_validate(spec)
    now = at or timezone.now()
    with transaction.atomic():
        queue = LocalQueue.objects.select_for_update().get(pk=spec.local_queue.pk)
        if queue.max_pending_jobs is not None:
            pending = Job.objects.filter(local_queue=queue, state=JobState.PENDING).count()
            engine_queue = EngineLocalQueue(
                name=queue.name, team=spec.team.slug, cluster_queue="", max_pending=queue.max_pending_jobs
            )
            if error := pending_limit_error(engine_queue, pending):
                raise ServiceError(error, field="queue", status_code=409)
        job = Job.objects.create(owner=owner, **spec.row())
        if at is not None:
            Job.objects.filter(pk=job.pk).update(created_at=at)
            job.created_at = at
        if spec.allowed_gpu_models:
            job.allowed_gpu_models.set(spec.allowed_gpu_models)
        if not settings.QUEUE_NEVER_FITTING_JOBS and (never := job_never_fits(job=job)) is not None:
            raise never_fits_error(never, spec)  # rolls the job back
        JobTransition.objects.create(
            job=job,
            from_state="",
            to_state=JobState.PENDING,
            at=now,
            reason="submitted",
            actor=owner.username,
        )
        if request_cycle:
            transaction.on_commit(_request_cycle)
    return job


def _request_cycle() -> None:
    """Ask for a cycle now, best effort. It runs after the write committed, so a broker outage must
    not turn the committed write into an error (a client would retry and submit twice): beat's next
    periodic cycle picks the change up."""
    try:
        if cycle_request_claim():  # a cycle already queued and not started covers this write
            # Started CYCLE_BATCH_S later, so a burst of submissions shares one cycle (each reads
            # every pending job: running one per submission keeps a worker busy for nothing).
            scheduling_cycle_task.apply_async(countdown=settings.CYCLE_BATCH_S or None)
    except BROKER_ERRORS as exc:
        logger.warning("could not enqueue a scheduling cycle (%s); the next periodic cycle will run it", exc)


def idempotent_submit(
    *, owner, key: str, fingerprint: str, submit: Callable[[], tuple[int, dict]], now: datetime | None = None
) -> tuple[int, dict, bool]:
    """Run ``submit`` (which answers ``(status, body)``) at most once per user and ``Idempotency-Key``.

    Returns ``(status, body, replayed)``. Within ``IDEMPOTENCY_TTL_S`` the same key and body get the
    first answer again; the same key with another body is a 422 naming the header. A submission
    that fails (4xx) leaves no trace, so the key can be used again.
    """
    now = now or timezone.now()
    with transaction.atomic():
        record = IdempotencyKey.objects.select_for_update().filter(user=owner, key=key).first()
        if record is not None and record.created_at < now - timedelta(seconds=settings.IDEMPOTENCY_TTL_S):
            record.delete()
            record = None
        if record is None:
            try:
                # The unique (user, key) index serializes two racing requests with one key: the second
                # insert waits for the first transaction, then fails, and the second replays the first.
                with transaction.atomic():
                    record = IdempotencyKey.objects.create(user=owner, key=key, fingerprint=fingerprint, created_at=now)
            except IntegrityError:
                record = IdempotencyKey.objects.select_for_update().get(user=owner, key=key)
            else:
                status_code, body = submit()
                record.status_code, record.response = status_code, body
                record.job_id = body.get("id") if isinstance(body, dict) else None
                record.save(update_fields=["status_code", "response", "job"])
                return status_code, body, False
        if record.fingerprint != fingerprint:
            raise ServiceError(
                "this key was used with a different request body; use a new key for a new job",
                field="Idempotency-Key",
                status_code=422,
            )
        return record.status_code or 201, record.response, True


def job_cancel(*, job: Job, by, at: datetime | None = None) -> Job:
    """Cancel a job that has not finished; its pods are deleted by the cluster backend.

    The job's owner, a team-admin of its team, or a platform admin may cancel it.
    """
    if job.owner_id != by.pk and not user_is_team_admin(user=by, team=job.team):
        raise ServiceError("only the job's owner or an admin of its team can cancel it", status_code=403)

    now = at or timezone.now()
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job.pk)
        if job.state not in CANCELLABLE_STATES:
            raise ServiceError(f"a {job.state} job cannot be cancelled", field="state", status_code=409)
        held_capacity = job.holds_capacity
        try:
            job_transition(job=job, to_state=JobState.CANCELLED, at=now, reason="cancelled", actor=by.username)
        except IllegalTransition as exc:  # pragma: no cover - guarded above
            raise ServiceError(str(exc), field="state", status_code=409) from exc
        if held_capacity:
            # Best effort after the commit (robust: a cluster API error is logged, not raised): the
            # cycle's reconcile deletes the pods of a cancelled job if this call fails.
            transaction.on_commit(partial(_stop_pods, job_id=job.pk), robust=True)
        transaction.on_commit(_request_cycle)
    return job


REQUEUABLE_STATES = frozenset(s for s in (*ACTIVE_STATES, JobState.PREEMPTED))


def _staff_only(by, what: str) -> None:
    if not getattr(by, "is_staff", False):
        raise ServiceError(f"only platform admins {what}", status_code=403)


def job_admin_cancel(*, job: Job, by, at: datetime | None = None) -> Job:
    """A platform admin cancels a job (as :func:`job_cancel`), recorded in the audit trail."""
    _staff_only(by, "cancel other teams' jobs from the admin")
    with transaction.atomic():
        before = job.state
        job = job_cancel(job=job, by=by, at=at)
        audit_record(
            by=by, action=AuditEntry.Action.JOB_CANCEL, target_type="job", target_id=job.pk, target=str(job),
            field="state", old=before, new=job.state, at=at,
        )  # fmt: skip
    return job


def job_requeue(*, job: Job, by, at: datetime | None = None) -> Job:
    """Send an admitted, running or preempted job back to its queue (its pods are stopped; its next
    admission is a new attempt). Platform admins only; recorded in the audit trail."""
    _staff_only(by, "requeue jobs")
    now = at or timezone.now()
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job.pk)  # orders this after a racing cancel or admission
        if job.state not in REQUEUABLE_STATES:
            raise ServiceError(f"a {job.state} job cannot be requeued", field="state", status_code=409)
        before = job.state
        held_capacity = job.holds_capacity
        job_transition(job=job, to_state=JobState.PENDING, at=now, reason="requeued by an admin", actor=by.username)
        audit_record(
            by=by, action=AuditEntry.Action.JOB_REQUEUE, target_type="job", target_id=job.pk, target=str(job),
            field="state", old=before, new=job.state, at=now,
        )  # fmt: skip
        if held_capacity:
            transaction.on_commit(partial(_stop_pods, job_id=job.pk), robust=True)
        transaction.on_commit(_request_cycle)
    return job


def job_priority_update(*, job: Job, by, priority_class: PriorityClass, at: datetime | None = None) -> Job:
    """Move a job that has not finished to another priority class (it is ranked by it from the next
    cycle on). Platform admins only; recorded in the audit trail like a quota change."""
    _staff_only(by, "change job priorities")
    with transaction.atomic():
        job = Job.objects.select_for_update().select_related("priority_class").get(pk=job.pk)
        if job.state in FINAL_STATES:
            raise ServiceError(f"a {job.state} job keeps its priority", field="state", status_code=409)
        before = job.priority_class
        if before.pk == priority_class.pk:
            return job
        job.priority_class = priority_class
        job.save(update_fields=["priority_class", "updated_at"])
        audit_record(
            by=by, action=AuditEntry.Action.JOB_PRIORITY, target_type="job", target_id=job.pk, target=str(job),
            field="priority_class", old=before, new=priority_class, at=at,
        )  # fmt: skip
        transaction.on_commit(_request_cycle)
    return job


@dataclass
class BulkResult:
    done: list[int] = field(default_factory=list)
    refused: list[tuple[int, str]] = field(default_factory=list)  # (job id, why)


def jobs_bulk_apply(*, jobs, by, action: Callable[[Job], object]) -> BulkResult:
    """Apply ``action`` (one of the services above, bound to ``by``) to each job in its own
    transaction: one job that cannot take it is reported, the others still do."""
    result = BulkResult()
    for job in jobs:
        try:
            action(job)
        except ServiceError as exc:
            result.refused.append((job.pk, exc.message))
        else:
            result.done.append(job.pk)
    return result


def _stop_pods(*, job_id: int) -> None:
    cluster_backend().stop(job_id=job_id, grace_s=30)


QUOTA_FIELDS = ("nominal_gpus", "borrowing_limit", "lending_limit")


def _fmt(value) -> str:
    return "" if value is None else str(value)


def queue_quota_update(
    *,
    cluster_queue: ClusterQueue,
    by,
    cpu_quota_milli: int | EllipsisType | None = ...,
    memory_quota_mib: int | EllipsisType | None = ...,
    flavors: dict[str, dict[str, int | None]] | None = None,
) -> list[QuotaChange]:
    """Change a ClusterQueue's quotas and record each change (who, when, old → new).

    ``flavors`` maps a GPU model name to the fields to set (nominal_gpus, borrowing_limit, lending_limit);
    a model the queue has no quota for yet gets one. Only platform admins may call this.
    """
    if not getattr(by, "is_staff", False):
        raise ServiceError("only platform admins edit quotas", status_code=403)
    with transaction.atomic():
        cq = ClusterQueue.objects.select_for_update().get(pk=cluster_queue.pk)
        before = quota_state(cq)
        if not isinstance(cpu_quota_milli, EllipsisType):
            cq.cpu_quota_milli = cpu_quota_milli
        if not isinstance(memory_quota_mib, EllipsisType):
            cq.memory_quota_mib = memory_quota_mib
        cq.save()
        for model_name, values in (flavors or {}).items():
            try:
                gpu_model = GpuModel.objects.get(name=model_name)
            except GpuModel.DoesNotExist:
                raise ServiceError(f"unknown GPU model {model_name!r}", field="flavors") from None
            unknown = sorted(set(values) - set(QUOTA_FIELDS))
            if unknown:
                raise ServiceError(f"unknown quota field {unknown[0]!r}", field="flavors")
            flavor, _ = FlavorQuota.objects.get_or_create(cluster_queue=cq, gpu_model=gpu_model)
            for key, value in values.items():
                setattr(flavor, key, value)
            flavor.save()
        # One mechanism for the API and the admin: diff the quota state before and after, record the changes.
        return quota_changes_record(by=by, before=before, after=quota_state(cq), cluster_queue=cq)


def quota_changes_record(*, by, before: dict[str, object], after: dict[str, object], cluster_queue: ClusterQueue):
    """Record the difference between two quota snapshots (used by the admin's form save)."""
    rows = [
        QuotaChange(
            cluster_queue=cluster_queue,
            field=key,
            old_value=_fmt(before.get(key)),
            new_value=_fmt(after.get(key)),
            changed_by=by,
        )
        for key in sorted(set(before) | set(after))
        if before.get(key) != after.get(key)
    ]
    QuotaChange.objects.bulk_create(rows)
    for row in rows:
        audit_record(
            by=by, action=AuditEntry.Action.QUOTA_CHANGE, target_type="cluster queue", target_id=cluster_queue.pk,
            target=cluster_queue.name, field=row.field, old=row.old_value, new=row.new_value,
        )  # fmt: skip
    return rows


def quota_state(cluster_queue: ClusterQueue) -> dict[str, object]:
    """The quota-relevant fields of a ClusterQueue as a flat dict (for change recording)."""
    state: dict[str, object] = {
        "cpu_quota_milli": cluster_queue.cpu_quota_milli,
        "memory_quota_mib": cluster_queue.memory_quota_mib,
    }
    for flavor in FlavorQuota.objects.filter(cluster_queue=cluster_queue).select_related("gpu_model"):
        for key in QUOTA_FIELDS:
            state[f"{flavor.gpu_model.name} {key}"] = getattr(flavor, key)
    return state


# -- the dry run --------------------------------------------------------------------------------------

DRY_RUN_ID = "dry-run"  # the unsubmitted job's id in the engine (no job row has it)


def workload_from_spec(spec: JobSpec, *, now: datetime) -> engine.Workload:
    """The engine's view of a job request that is not submitted (as the cycle reads a submitted one)."""
    row = Job(**spec.row())  # unsaved: the request's columns, read as a job's
    return workload_from_request(
        row, pk=DRY_RUN_ID, now=now, allowed_gpu_models=tuple(m.name for m in spec.allowed_gpu_models)
    )


@dataclass(frozen=True, slots=True)
class SpecCheck:
    """A dry run of a job request: the engine's answer, its estimated cost, the jobs it would preempt."""

    answer: JobCheck
    cost: PlannedCost | None
    victims: tuple[Job, ...]
    suggestion_changes: tuple[dict[str, Any], ...]  # each suggestion's change in the spec's words


def job_check_spec(*, spec: JobSpec, now: datetime | None = None) -> SpecCheck:
    """Dry run of a job request (the submit body): validated as ``job_submit`` validates it, then
    answered by the engine on the current state (``scheduling.selectors.job_check``) and priced from
    the price book on the GPU model and capacity type it would get, for its expected runtime.
    Nothing is written."""
    job_spec_validate(spec)
    now = now or timezone.now()
    workload = workload_from_spec(spec, now=now)
    answer = job_check(workload=workload)
    cost = None
    if answer.check.verdict != "never":
        cost = _check_cost(spec, workload, answer, now)
    victims = tuple(Job.objects.filter(pk__in=[int(v) for v in answer.check.preempts]).select_related("team"))
    changes = tuple(_spec_change(dict(s.change)) for s in answer.suggestions)
    return SpecCheck(answer, cost, victims, changes)


def _check_cost(spec: JobSpec, workload: engine.Workload, answer: JobCheck, now: datetime) -> PlannedCost | None:
    check = answer.check
    if check.placements:
        share = sum(placement_billed_units(p) for p in check.placements)
        cpu_milli = sum(p.cpu_milli for p in check.placements)
        memory_mib = sum(p.memory_mib for p in check.placements)
        model = check.gpu_model or ""
    else:  # waits without a forecast start: priced on the first GPU model its queue would try
        flavors = tuple(f.gpu_model.name for f in spec.local_queue.cluster_queue.flavors.select_related("gpu_model"))
        tried = models_to_try(workload, flavors)
        model = tried[0] or "" if tried else ""
        if spec.gpu_memory_gib:
            return None  # its GPU count depends on the model's memory: known once placed
        share = billed_units(gpus=spec.gpu, gpu_milli=spec.gpu_milli, mig_profile=spec.mig_profile or None)
        share *= spec.replicas
        cpu_milli, memory_mib = spec.cpu_milli * spec.replicas, spec.memory_mib * spec.replicas
        for pod_set in workload.pod_sets:  # a Ray job's worker groups (whole GPUs)
            share += billed_units(gpus=pod_set.resources.gpu) * pod_set.replicas
            cpu_milli += pod_set.resources.cpu_milli * pod_set.replicas
            memory_mib += pod_set.resources.memory_mib * pod_set.replicas
    start = now
    if check.estimated_start_p50 is not None:
        start = max(now, datetime.fromtimestamp(check.estimated_start_p50, tz=now.tzinfo))
    return planned_cost(
        gpu_model=model,
        capacity_type=answer.capacity_type,
        gpu_share_7000ths=share,
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        start=start,
        runtime_s=check.runtime_s,
    )


def _spec_change(change: dict[str, Any]) -> dict[str, Any]:
    """A suggestion's change in the submit body's words (lists, not tuples)."""
    return {key: list(value) if isinstance(value, tuple) else value for key, value in change.items()}
