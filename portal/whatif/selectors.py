"""Reads for the what-if pages: who may use them, the form's current values, runs a user may see."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import QuerySet

from portal.jobs.models import ClusterQueue, LocalQueue
from portal.tenants.models import Membership
from portal.whatif.models import WhatIfRun


def whatif_allowed(*, user) -> bool:
    """Platform admins, and team admins (for their own team's weights)."""
    return bool(user.is_staff) or Membership.objects.filter(user=user, role=Membership.Role.TEAM_ADMIN).exists()


def whatif_run_list(*, user, limit: int = 20) -> QuerySet[WhatIfRun]:
    runs = WhatIfRun.objects.select_related("created_by").defer("result")
    if not user.is_staff:
        runs = runs.filter(created_by=user)
    return runs[:limit]


def whatif_run_get(*, user, pk: int) -> WhatIfRun | None:
    runs = WhatIfRun.objects.filter(pk=pk)
    if not user.is_staff:
        runs = runs.filter(created_by=user)
    return runs.first()


@dataclass
class FlavorRow:
    gpu_model: str
    nominal_gpus: int
    borrowing_limit: int | None
    lending_limit: int | None


@dataclass
class ClusterQueueRow:
    name: str
    cohort: str
    weight: float
    flavors: list[FlavorRow] = field(default_factory=list)


@dataclass
class LocalQueueRow:
    key: str  # team/name, the engine's local queue name
    team: str
    cluster_queue: str
    weight: float
    editable: bool


def whatif_settings(*, user) -> tuple[list[ClusterQueueRow], list[LocalQueueRow]]:
    """Today's quotas and weights as the form shows them; a team admin's editable rows are their own
    team's local queues (platform admins edit everything)."""
    own = set(
        Membership.objects.filter(user=user, role=Membership.Role.TEAM_ADMIN).values_list("team__slug", flat=True)
    )
    cluster_queues = [
        ClusterQueueRow(
            name=cq.name,
            cohort=cq.cohort,
            weight=cq.weight,
            flavors=[
                FlavorRow(f.gpu_model.name, f.nominal_gpus, f.borrowing_limit, f.lending_limit)
                for f in cq.flavors.all()
            ],
        )
        for cq in ClusterQueue.objects.prefetch_related("flavors__gpu_model").order_by("name")
    ]
    local_queues = [
        LocalQueueRow(
            key=f"{lq.team.slug}/{lq.name}",
            team=lq.team.slug,
            cluster_queue=lq.cluster_queue.name,
            weight=lq.weight,
            editable=bool(user.is_staff) or lq.team.slug in own,
        )
        for lq in LocalQueue.objects.select_related("team", "cluster_queue").order_by("team__slug", "name")
    ]
    return cluster_queues, local_queues
