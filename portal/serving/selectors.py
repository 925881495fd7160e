"""Reads on inference services, scoped to what the user may see."""

from __future__ import annotations

from django.db.models import QuerySet

from portal.jobs.models import Job
from portal.serving.models import InferenceService, ServiceSample
from portal.tenants.selectors import team_list_for_user


def service_list(*, user) -> QuerySet[InferenceService]:
    """Services of the user's teams (every service for platform admins)."""
    services = InferenceService.objects.select_related("team", "owner", "local_queue", "priority_class")
    if user.is_staff:
        return services
    return services.filter(team_id__in=list(team_list_for_user(user=user).values_list("id", flat=True)))


def service_replica_jobs(*, service: InferenceService) -> list[Job]:
    """Every job that ran or runs a replica of the service, oldest first."""
    return list(
        Job.objects.filter(service_replica__service=service)
        .select_related("team", "local_queue__cluster_queue", "priority_class", "owner", "gpu_model")
        .order_by("created_at", "id")
    )


def service_samples(*, service: InferenceService, limit: int = 500) -> list[ServiceSample]:
    """The latest autoscaler samples, oldest first (the page's replicas-against-load chart)."""
    rows = ServiceSample.objects.filter(service=service).order_by("-at")[:limit]
    return list(reversed(list(rows)))
