"""Read-side queries for jobs and queues, always scoped to what the user may see."""

from __future__ import annotations

from collections import defaultdict

from django.db.models import Count, IntegerField, JSONField, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce

from portal.jobs.models import ClusterQueue, FlavorQuota, Job, JobAttempt, LocalQueue, ReplicaPlacement
from portal.jobs.states import ACTIVE_STATES, JobState
from portal.tenants.selectors import team_ids_for_user, team_list_for_user
from scheduling.adapters.k8s.affinity import describe
from scheduling.adapters.workloads import job_rules
from scheduling.engine.model import ReplicaPlacement as EnginePlacement
from scheduling.engine.shares import QUOTA_MILLI_PER_GPU, billed_gpus, placement_billed_units, placement_quota_milli


def job_list(*, user) -> QuerySet[Job]:
    """Jobs of the teams the user belongs to (all jobs for platform admins)."""
    jobs = Job.objects.select_related("team", "local_queue", "priority_class", "gpu_model", "owner")
    team_ids = team_ids_for_user(user=user)
    if team_ids is None:
        return jobs
    # The team ids as a list, not a subquery: the page query of every job list and detail request
    # plans a five-table join, and a DISTINCT subquery inside it costs more to plan than to run.
    return jobs.filter(team_id__in=team_ids)


def job_get(*, user, pk: int) -> Job | None:
    return job_list(user=user).filter(pk=pk).first()


def job_placement_rules(*, job: Job, levels: dict[str, str]) -> list[tuple[str, str]]:
    """The job's placement rules in words, ``(what, rule)`` per line; ``levels`` names the node label
    of each one-domain level (``scheduling.selectors.topology_level_labels``)."""
    return describe(job_rules(job), levels)


def with_last_nodes(jobs: QuerySet[Job]) -> QuerySet[Job]:
    """``jobs`` annotated with ``last_nodes``: the nodes of their latest attempt (running or not), so a
    list can say where a job runs or ran without a query per row (the live placement rows are gone
    once a job stops)."""
    latest = JobAttempt.objects.filter(job=OuterRef("pk"), number=OuterRef("attempt")).values("nodes")[:1]
    return jobs.annotate(last_nodes=Subquery(latest, output_field=JSONField()))


def job_attempt_list(*, job: Job) -> QuerySet[JobAttempt]:
    """A job's attempts, first to last."""
    return JobAttempt.objects.filter(job=job).order_by("number")


def gpus_allocated() -> float:
    """GPUs held right now by admitted and running jobs, counted as the bill counts them (billed shares)."""
    rows = ReplicaPlacement.objects.filter(job__state__in=ACTIVE_STATES)
    return float(billed_gpus(sum(placement_billed_units(row.engine_placement()) for row in rows)))


def local_queue_list(*, user) -> QuerySet[LocalQueue]:
    queues = LocalQueue.objects.select_related("team", "cluster_queue")
    if not user.is_staff:
        queues = queues.filter(team__in=team_list_for_user(user=user))
    # Counted per queue through the (local_queue, state) index: a join and GROUP BY over every job the
    # queues ever had reads all of their history (half a second with 100,000 jobs).
    return queues.annotate(
        pending_jobs=_count_of(Q(state=JobState.PENDING)),
        active_jobs=_count_of(Q(state__in=ACTIVE_STATES)),
    ).order_by("team__name", "name")


def _count_of(condition: Q):
    jobs = Job.objects.filter(condition, local_queue=OuterRef("pk")).order_by().values("local_queue")
    return Coalesce(Subquery(jobs.annotate(n=Count("id")).values("n")[:1], output_field=IntegerField()), 0)


def cluster_queue_usage() -> dict[str, dict[str, float]]:
    """GPUs in use per ClusterQueue per GPU model, counted as quota counts them (quota shares: a
    fraction by its share, a MIG slice by its memory share), so they compare with the nominal quota."""
    usage: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    rows = ReplicaPlacement.objects.filter(job__state__in=ACTIVE_STATES, job__gpu_model__isnull=False).values_list(
        "job__local_queue__cluster_queue__name", "job__gpu_model__name", "job__gpu_model__memory_gib", "gpu_indices",
        "gpu_milli", "mig_profile",
    )  # fmt: skip
    for cq, model, memory_gib, indices, milli, mig in rows:
        placement = EnginePlacement(node="", gpu_indices=tuple(indices), gpu_milli=milli, mig_profile=mig or None)
        usage[cq][model] += placement_quota_milli(placement, memory_gib) / QUOTA_MILLI_PER_GPU
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
