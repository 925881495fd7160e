"""Read-side queries for jobs and queues, always scoped to what the user may see."""

from __future__ import annotations

from collections import defaultdict

from django.db.models import Count, Q, QuerySet

from portal.jobs.models import ClusterQueue, FlavorQuota, Job, LocalQueue, ReplicaPlacement
from portal.jobs.states import ACTIVE_STATES, JobState
from portal.tenants.selectors import team_list_for_user


def job_list(*, user) -> QuerySet[Job]:
    """Jobs of the teams the user belongs to (all jobs for platform admins)."""
    jobs = Job.objects.select_related("team", "local_queue", "priority_class", "gpu_model", "owner")
    if user.is_staff:
        return jobs
    return jobs.filter(team__in=team_list_for_user(user=user))


def job_get(*, user, pk: int) -> Job | None:
    return job_list(user=user).filter(pk=pk).first()


def gpus_allocated() -> float:
    """GPUs held right now by admitted and running jobs, counted as the bill counts them (shares)."""
    from scheduling.adapters.orm import placement_from_row, placement_gpus

    rows = ReplicaPlacement.objects.filter(job__state__in=ACTIVE_STATES)
    return float(placement_gpus(tuple(placement_from_row(row) for row in rows)))


def local_queue_list(*, user) -> QuerySet[LocalQueue]:
    queues = LocalQueue.objects.select_related("team", "cluster_queue")
    if not user.is_staff:
        queues = queues.filter(team__in=team_list_for_user(user=user))
    return queues.annotate(
        pending_jobs=Count("jobs", filter=Q(jobs__state=JobState.PENDING)),
        active_jobs=Count("jobs", filter=Q(jobs__state__in=ACTIVE_STATES)),
    ).order_by("team__name", "name")  # GROUP BY queries drop Meta.ordering


def cluster_queue_usage() -> dict[str, dict[str, float]]:
    """GPUs in use per ClusterQueue per GPU model (shares: fractions and MIG slices count partly)."""
    usage: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    jobs = Job.objects.filter(state__in=ACTIVE_STATES).select_related("local_queue__cluster_queue", "gpu_model")
    for job in jobs.prefetch_related("placements"):
        if job.gpu_model is None:
            continue
        replicas = len(job.placements.all()) or job.replicas
        share = job.gpu_share_per_replica
        if job.gpu_memory_gib:
            share = sum(len(p.gpu_indices) for p in job.placements.all()) / max(replicas, 1)
        usage[job.local_queue.cluster_queue.name][job.gpu_model.name] += share * replicas
    return usage


def cluster_queue_list() -> list[dict]:
    """Every ClusterQueue with its quotas and current usage per GPU model, for pages and the API."""
    usage = cluster_queue_usage()
    flavors = defaultdict(list)
    for flavor in FlavorQuota.objects.select_related("gpu_model", "cluster_queue"):
        flavors[flavor.cluster_queue_id].append(flavor)
    return [
        {
            "name": cq.name,
            "cohort": cq.cohort,
            "cpu_quota_milli": cq.cpu_quota_milli,
            "memory_quota_mib": cq.memory_quota_mib,
            "weight": cq.weight,
            "flavors": [
                {
                    "gpu_model": f.gpu_model.name,
                    "nominal_gpus": f.nominal_gpus,
                    "borrowing_limit": f.borrowing_limit,
                    "lending_limit": f.lending_limit,
                    "used_gpus": round(usage[cq.name].get(f.gpu_model.name, 0.0), 3),
                }
                for f in flavors[cq.pk]
            ],
        }
        for cq in ClusterQueue.objects.all()
    ]
