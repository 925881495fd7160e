"""Builders for a small, realistic world: GPU models, teams, users, queues and simulated nodes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User

from portal.jobs.models import ClusterQueue, FlavorQuota, GpuModel, LocalQueue, PriorityClass
from portal.jobs.services import JobSpec, job_submit
from portal.tenants.models import Membership, Team
from scheduling.models import SimNode

MIG_80GB = ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]


@dataclass
class World:
    models: dict[str, GpuModel]
    priorities: dict[str, PriorityClass]
    teams: dict[str, Team]
    users: dict[str, User]
    queues: dict[str, LocalQueue]
    cluster_queues: dict[str, ClusterQueue]

    def spec(self, team: str = "vision", **overrides) -> JobSpec:
        fields: dict[str, Any] = {
            "team": self.teams[team],
            "local_queue": self.queues[team],
            "image": "nvcr.io/nvidia/pytorch:24.08-py3",
            "priority_class": self.priorities["default"],
            "gpu": 1,
            "cpu_milli": 2000,
            "memory_mib": 8192,
            "runtime_s": 3600,
        }
        fields.update(overrides)
        return JobSpec(**fields)

    def submit(self, team: str = "vision", owner: str | None = None, **overrides):
        owner = owner or {"vision": "alice", "nlp": "bob"}[team]
        return job_submit(owner=self.users[owner], spec=self.spec(team, **overrides), request_cycle=False)


def build_world(*, a100_nodes: int = 2, t4_nodes: int = 1, nominal_a100: int = 8) -> World:
    models = {
        "A100-80GB": GpuModel.objects.create(name="A100-80GB", memory_gib=80, mig_profiles=MIG_80GB),
        "T4": GpuModel.objects.create(name="T4", memory_gib=16, mig_profiles=[]),
    }
    priorities = {
        "low": PriorityClass.objects.create(name="low", value=100),
        "default": PriorityClass.objects.create(name="default", value=500),
        "critical": PriorityClass.objects.create(name="critical", value=10000, preemptible=False),
    }
    User = get_user_model()
    users = {
        "alice": User.objects.create_user("alice", password="pw-alice"),
        "bob": User.objects.create_user("bob", password="pw-bob"),
        "carol": User.objects.create_user("carol", password="pw-carol"),  # in both teams
        "admin": User.objects.create_user("admin", password="pw-admin", is_staff=True, is_superuser=True),
    }
    teams = {
        "vision": Team.objects.create(name="Vision", slug="vision", namespace="team-vision"),
        "nlp": Team.objects.create(name="NLP", slug="nlp", namespace="team-nlp"),
    }
    Membership.objects.create(user=users["alice"], team=teams["vision"], role=Membership.Role.TEAM_ADMIN)
    Membership.objects.create(user=users["bob"], team=teams["nlp"])
    Membership.objects.create(user=users["carol"], team=teams["vision"])
    Membership.objects.create(user=users["carol"], team=teams["nlp"])
    cluster_queues, queues = {}, {}
    for slug in ("vision", "nlp"):
        cq = ClusterQueue.objects.create(name=f"cq-{slug}", cohort="research")
        FlavorQuota.objects.create(cluster_queue=cq, gpu_model=models["A100-80GB"], nominal_gpus=nominal_a100, order=0)
        FlavorQuota.objects.create(cluster_queue=cq, gpu_model=models["T4"], nominal_gpus=4, order=1)
        cluster_queues[slug] = cq
        queues[slug] = LocalQueue.objects.create(name="default", team=teams[slug], cluster_queue=cq)
    for i in range(a100_nodes):
        SimNode.objects.create(
            name=f"a100-{i}",
            gpu_model=models["A100-80GB"],
            gpu_count=8,
            cpu_milli=96_000,
            memory_mib=1024 * 1024,
            labels={"karpenter.sh/capacity-type": "on-demand"},
        )
    for i in range(t4_nodes):
        SimNode.objects.create(
            name=f"t4-{i}",
            gpu_model=models["T4"],
            gpu_count=4,
            cpu_milli=32_000,
            memory_mib=128 * 1024,
            labels={"karpenter.sh/capacity-type": "spot"},
        )
    return World(models, priorities, teams, users, queues, cluster_queues)
