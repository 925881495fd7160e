"""Writes that touch jobs and queues. Views, serializers, tasks and the admin call these; they hold the rules."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from datetime import datetime
from types import EllipsisType
from typing import Any

from django.db import transaction
from django.utils import timezone

from portal.jobs.errors import ServiceError
from portal.jobs.models import (
    ClusterQueue,
    FlavorQuota,
    GpuModel,
    Job,
    JobTransition,
    LocalQueue,
    PriorityClass,
    QuotaChange,
)
from portal.jobs.states import CANCELLABLE_STATES, IllegalTransition, JobState
from portal.jobs.transitions import job_transition
from portal.tenants.models import Team
from portal.tenants.selectors import user_is_team_admin
from scheduling.adapters.factory import cluster_backend
from scheduling.adapters.k8s.pods import valid_label
from scheduling.engine.admission import pending_limit_error
from scheduling.engine.model import LocalQueue as EngineLocalQueue
from scheduling.tasks import scheduling_cycle_task

MAX_GPUS_PER_REPLICA = 64
MAX_REPLICAS = 1024
MAX_CPU_MILLI = 1024 * 1000
MAX_MEMORY_MIB = 16 * 1024 * 1024  # 16 TiB
MAX_GPU_MEMORY_GIB = 8 * 1024
MAX_RUNTIME_S = 90 * 24 * 3600
MIG_PROFILE_RE = re.compile(r"^[1-7]g\.\d+gb$")
MAX_LABELS = 32


def label_problem(key: str, value: str) -> str | None:
    """Why ``key=value`` is not a valid Kubernetes label (None when it is).

    The pod builder's own check decides, so a label accepted here is one the job's pods carry.
    """
    if not valid_label(key, ""):
        return f"{key!r} is not a valid label key (an optional DNS prefix and '/', then 1-63 of [A-Za-z0-9-_.])"
    if not valid_label(key, value):
        return f"value {value!r} of {key!r} is not a valid label value (0-63 of [A-Za-z0-9-_.])"
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSpec:
    """A validated-shape job request (types checked by the serializer/form, rules checked here).

    Its fields, in this order, are the one list of what a job request holds (``SPEC_FIELDS``)."""

    team: Team
    local_queue: LocalQueue
    name: str = ""
    kind: str = Job.Kind.TRAINING
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
    labels: tuple[tuple[str, str], ...] = ()

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
_LIST_FIELDS = frozenset({"command", "tolerations", "allowed_gpu_models"})


def job_spec_validate(spec: JobSpec) -> None:
    """Business rules for a job request. Raises ServiceError naming the field at fault."""
    if not spec.image.strip():
        raise ServiceError("an image is required", field="image")
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
        raise ServiceError(
            f"set only one of whole GPUs, a GPU fraction, a MIG profile or GPU memory (got {', '.join(gpu_kinds)})",
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
    for field_name, pairs in (("labels", spec.labels), ("node_selector", spec.node_selector)):
        if len(pairs) > MAX_LABELS:
            raise ServiceError(f"at most {MAX_LABELS} entries", field=field_name)
        for key, value in pairs:
            if problem := label_problem(key, value):
                raise ServiceError(problem, field=field_name)
    if not 1 <= spec.runtime_s <= MAX_RUNTIME_S:
        raise ServiceError(f"must be between 1 s and {MAX_RUNTIME_S} s (90 days)", field="runtime_s")


def job_submit(*, owner, spec: JobSpec, at: datetime | None = None, request_cycle: bool = True) -> Job:
    """Create a Pending job, enforcing the local queue's max pending jobs, and schedule a cycle.

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
        job.allowed_gpu_models.set(spec.allowed_gpu_models)
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
    scheduling_cycle_task.delay()


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
            transaction.on_commit(lambda: cluster_backend().stop(job_id=job.pk, grace_s=30))
        transaction.on_commit(_request_cycle)
    return job


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
