"""Rows for the chaos script and the benchmarks: GPU models, teams with users and API tokens, cluster
queues in a cohort, local queues, simulated nodes, and pending jobs written in bulk.

Call after Django is set up (``stack.django_against``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class BenchWorld:
    teams: list[str]
    users: dict[str, Any]
    tokens: dict[str, str] = field(default_factory=dict)
    member_tokens: dict[str, list[str]] = field(default_factory=dict)


def world_build(
    *,
    teams: tuple[str, ...] = ("vision", "nlp"),
    nodes: int = 16,
    gpus_per_node: int = 8,
    nominal_gpus: dict[str, int] | None = None,
    borrowing_limit: dict[str, int | None] | None = None,
    members: int = 1,
) -> BenchWorld:
    """Teams (each with ``members`` users, the first in ``users``, every member's token in
    ``member_tokens``), their cluster queues in one cohort, local queues and simulated nodes."""
    from django.contrib.auth import get_user_model

    from portal.jobs.models import ClusterQueue, FlavorQuota, GpuModel, LocalQueue, PriorityClass
    from portal.tenants.models import Membership, Team
    from portal.tokens.services import api_token_create
    from scheduling.models import SimNode

    a100 = GpuModel.objects.create(name="A100-80GB", memory_gib=80, mig_profiles=[])
    PriorityClass.objects.create(name="default", value=500)
    user_model = get_user_model()
    users: dict[str, Any] = {}
    tokens: dict[str, str] = {}
    member_tokens: dict[str, list[str]] = {}
    for slug in teams:
        team = Team.objects.create(name=slug.title(), slug=slug, namespace=f"team-{slug}")
        member_tokens[slug] = []
        for index in range(members):
            member = user_model.objects.create_user(f"{slug}-user{index or ''}", password="bench")
            Membership.objects.create(user=member, team=team)
            member_tokens[slug].append(api_token_create(user=member, name="bench")[1])
            if index == 0:
                users[slug] = member
                tokens[slug] = member_tokens[slug][0]
        cq = ClusterQueue.objects.create(name=f"cq-{slug}", cohort="research")
        FlavorQuota.objects.create(
            cluster_queue=cq,
            gpu_model=a100,
            nominal_gpus=(nominal_gpus or {}).get(slug, nodes * gpus_per_node // len(teams)),
            borrowing_limit=(borrowing_limit or {}).get(slug),
        )
        LocalQueue.objects.create(name="default", team=team, cluster_queue=cq)
    SimNode.objects.bulk_create(
        SimNode(
            name=f"a100-{i:04d}",
            gpu_model=a100,
            gpu_count=gpus_per_node,
            cpu_milli=gpus_per_node * 16_000,
            memory_mib=gpus_per_node * 128 * 1024,
            labels={"karpenter.sh/capacity-type": "on-demand"},
        )
        for i in range(nodes)
    )
    return BenchWorld(teams=list(teams), users=users, tokens=tokens, member_tokens=member_tokens)


def jobs_bulk(world: BenchWorld, team: str, count: int, **fields: Any) -> list[int]:
    """``count`` pending jobs of ``team``, written in bulk with their Pending transition."""
    from django.utils import timezone

    from portal.jobs.models import Job, JobTransition, LocalQueue, PriorityClass
    from portal.jobs.states import JobState

    queue = LocalQueue.objects.select_related("team").get(team__slug=team, name="default")
    priority = PriorityClass.objects.get(name="default")
    values = {"gpu": 1, "cpu_milli": 1000, "memory_mib": 4096, "runtime_s": 60, **fields}
    jobs = Job.objects.bulk_create(
        Job(
            owner=world.users[team],
            team=queue.team,
            local_queue=queue,
            image="nvcr.io/nvidia/pytorch:24.08-py3",
            priority_class=priority,
            **values,
        )
        for _ in range(count)
    )
    now = timezone.now()
    JobTransition.objects.bulk_create(
        JobTransition(job=job, from_state="", to_state=JobState.PENDING, at=now, reason="submitted", actor="bench")
        for job in jobs
    )
    return [job.pk for job in jobs]
