"""Idle-GPU flags of a job (its page) and the policy of a job's queue."""

from __future__ import annotations

from django.db.models import QuerySet

from billing.models import IdleFlag, IdlePolicy
from portal.jobs.models import Job


def job_idle_flag_list(*, job: Job) -> QuerySet[IdleFlag]:
    return IdleFlag.objects.filter(job=job)


def job_idle_policy(*, job: Job) -> IdlePolicy | None:
    return IdlePolicy.objects.filter(cluster_queue_id=job.local_queue.cluster_queue_id, enabled=True).first()
