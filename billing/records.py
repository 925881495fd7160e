"""Unsaved usage records: one Running interval of a job as a ``UsageRecord`` row.

Metering stores them; the cost of running jobs builds them up to ``now`` without storing them. This
module imports only models and the pure core, so both the selectors and the services use it.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from billing.core.intervals import RunInterval
from billing.core.usage import UNKNOWN, Utilization, interval_usage
from billing.models import UsageRecord
from portal.jobs.models import Job


def job_labels(job: Job) -> dict[str, str]:
    """Labels a usage record can be aggregated by (``label:<key>``)."""
    labels = {
        "kind": job.kind,
        "priority-class": job.priority_class.name,
        "owner": job.owner.get_username(),
    }
    labels.update({str(k): str(v) for k, v in (getattr(job, "labels", None) or {}).items()})
    return labels


def _util(pct: float | None) -> float | None:
    """Utilization to 0.0001 %: a measured 5e-324 % (a subnormal float) made the rollup's float division
    underflow in PostgreSQL ("value out of range: underflow")."""
    return None if pct is None else round(pct, 4)


def usage_record(
    job: Job, interval: RunInterval, *, end: datetime | None = None, utilization: Utilization = UNKNOWN
) -> UsageRecord:
    """The usage record of one interval (closed at ``end`` when the interval is still open).

    Exact integer figures first; the rounded convenience ones derive from them. The job must come with
    its team, local queue (and cluster queue), priority class and owner loaded.
    """
    closed = interval.closed_end if end is None else end
    usage = interval_usage(
        start=interval.start,
        end=closed,
        detail=interval.detail,
        requested_gpus=Decimal(str(job.gpu_share_per_replica)) * job.replicas,
        replicas=job.replicas,
        cpu_milli=job.cpu_milli,
        memory_mib=job.memory_mib,
    )
    return UsageRecord(
        job=job,
        team_id=job.team_id,
        namespace=job.team.namespace,
        local_queue=job.local_queue.name,
        cluster_queue=job.local_queue.cluster_queue.name,
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
        labels=job_labels(job) | {"capacity-type": usage.capacity_type},
    )
