"""Unsaved usage records: one Running interval of a job as a ``UsageRecord`` row.

Metering stores them; the cost of running jobs builds them up to ``now`` without storing them. This
module imports only models and the pure core, so both the selectors and the services use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model

from billing.core.intervals import RunInterval
from billing.core.usage import UNKNOWN, Utilization, interval_usage
from billing.models import UsageRecord
from portal.jobs.models import Job
from scheduling.engine.shares import BILLED_UNITS_PER_GPU, billed_units


def job_labels(job: Job) -> dict[str, str]:
    """Labels a usage record can be aggregated by (``label:<key>``)."""
    return _labels(job.kind, job.priority_class.name, job.owner.get_username(), getattr(job, "labels", None))


def _labels(kind: str, priority_class: str, owner: str, labels: dict[str, Any] | None) -> dict[str, str]:
    out = {"kind": kind, "priority-class": priority_class, "owner": owner}
    out.update({str(k): str(v) for k, v in (labels or {}).items()})
    return out


@dataclass(frozen=True, slots=True)
class RecordJob:
    """What a usage record takes of its job, read as one row (``RECORD_JOB_VALUES``) rather than a
    ``Job`` with four related instances: the running jobs' usage is built on every cost request."""

    job_id: int
    team_id: int
    namespace: str
    local_queue: str
    cluster_queue: str
    gpu: int
    gpu_milli: int
    mig_profile: str
    replicas: int
    cpu_milli: int
    memory_mib: int
    labels: dict[str, str]
    owner_name: str


def record_job_values() -> tuple[str, ...]:
    """The ``values()`` fields of a ``Job`` query that ``record_job`` takes, in its order."""
    owner = f"owner__{get_user_model().USERNAME_FIELD}"
    return (
        "pk", "team_id", "team__namespace", "local_queue__name", "local_queue__cluster_queue__name", "gpu",
        "gpu_milli", "mig_profile", "replicas", "cpu_milli", "memory_mib", "kind", "priority_class__name", owner,
        "labels",
    )  # fmt: skip


def record_job(row: tuple[Any, ...]) -> RecordJob:
    """A ``RecordJob`` from a ``values_list(*record_job_values())`` row."""
    (
        pk,
        team_id,
        namespace,
        queue,
        cluster_queue,
        gpu,
        gpu_milli,
        mig,
        replicas,
        cpu,
        memory,
        kind,
        pc,
        owner,
        labels,
    ) = row
    return RecordJob(
        pk, team_id, namespace, queue, cluster_queue, gpu, gpu_milli, mig, replicas, cpu, memory,
        _labels(kind, pc, str(owner), labels), str(owner),
    )  # fmt: skip


def _util(pct: float | None) -> float | None:
    """Utilization to 0.0001 %: a measured 5e-324 % (a subnormal float) made the rollup's float division
    underflow in PostgreSQL ("value out of range: underflow")."""
    return None if pct is None else round(pct, 4)


def usage_record(
    job: Job | RecordJob, interval: RunInterval, *, end: datetime | None = None, utilization: Utilization = UNKNOWN
) -> UsageRecord:
    """The usage record of one interval (closed at ``end`` when the interval is still open).

    Exact integer figures first; the rounded convenience ones derive from them. A ``Job`` must come
    with its team, local queue (and cluster queue), priority class and owner loaded. From a
    ``RecordJob`` the record has ``job_id`` (no job instance) and ``owner_name``, the job owner's
    name (what ``record.job.owner.get_username()`` would read).
    """
    if isinstance(job, Job):
        of = RecordJob(
            job.pk, job.team_id, job.team.namespace, job.local_queue.name, job.local_queue.cluster_queue.name,
            job.gpu, job.gpu_milli, job.mig_profile, job.replicas, job.cpu_milli, job.memory_mib, job_labels(job),
            job.owner.get_username(),
        )  # fmt: skip
    else:
        of = job
    closed = interval.closed_end if end is None else end
    # Billed GPUs of one replica, as ``Job.gpu_share_per_replica`` (the float it is) words it.
    per_replica = billed_units(gpus=of.gpu, gpu_milli=of.gpu_milli, mig_profile=of.mig_profile or None)
    usage = interval_usage(
        start=interval.start,
        end=closed,
        detail=interval.detail,
        requested_gpus=Decimal(str(per_replica / BILLED_UNITS_PER_GPU)) * of.replicas,
        replicas=of.replicas,
        cpu_milli=of.cpu_milli,
        memory_mib=of.memory_mib,
    )
    record = UsageRecord(
        team_id=of.team_id,
        namespace=of.namespace,
        local_queue=of.local_queue,
        cluster_queue=of.cluster_queue,
        gpu_model=usage.gpu_model,
        capacity_type=usage.capacity_type,
        start=interval.start,
        end=closed,
        gpus=usage.gpus,
        gpu_seconds=usage.gpu_seconds,
        cpu_core_seconds=usage.cpu_core_seconds,
        memory_gib_seconds=usage.memory_gib_seconds,
        gpu_share_7000ths=usage.share,
        duration_us=usage.duration_us,
        gpu_usage=usage.gpu_usage,
        cpu_milli_us=usage.cpu_milli_us,
        memory_mib_us=usage.memory_mib_us,
        gpu_util_pct=_util(utilization.gpu_util_pct) if usage.share else None,
        gpu_fb_used_mib=utilization.fb_used_mib if usage.share else None,
        labels=of.labels | {"capacity-type": usage.capacity_type},
    )
    if isinstance(job, Job):
        record.job = job
    else:
        record.job_id = job.job_id
        record.owner_name = job.owner_name  # type: ignore[attr-defined] # a plain attribute, not a column
    return record
