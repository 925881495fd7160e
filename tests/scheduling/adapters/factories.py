"""Builders for the adapter tests: Kubernetes objects as the translations see them, and bulk job rows
for the control-loop tests (the root ``tests/factories.py`` builds the world)."""

from __future__ import annotations

from django.utils import timezone

from portal.jobs.models import Job, JobTransition
from portal.jobs.states import JobState
from scheduling.adapters.k8s.manifests import PodJob, pod_manifest
from scheduling.engine.model import ReplicaPlacement
from tests.factories import World
from tests.scheduling.adapters.fakeapi import FakeKubeApi

JOB = PodJob(
    job_id=42,
    attempt=3,
    namespace="team-vision",
    team="vision",
    queue="default",
    image="nvcr.io/nvidia/pytorch:24.08-py3",
    command=("python", "train.py"),
    replicas=2,
    cpu_milli=4000,
    memory_mib=16384,
    tolerations=({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},),
    node_selector=(("pool", "a100"),),
)


def node(**kwargs) -> dict:
    api = FakeKubeApi()
    return api.add_node("n1", **kwargs)


def managed_pod(replica: int, phase: str, *, node: str = "n1", **status) -> dict:
    """A pod of ``JOB`` bound to ``node`` in ``phase``, with ``status`` fields added."""
    pod = pod_manifest(JOB, replica, ReplicaPlacement(node=node), scheduler_name="gpu-portal", run_as_user=1000)
    pod["spec"]["nodeName"] = node
    pod["status"] = {"phase": phase, **status}
    return pod


def bulk_jobs(world: World, count: int, *, team: str = "vision", owner: str = "alice", **fields) -> list[int]:
    """``count`` pending jobs written in bulk (job_submit's per-job transaction is slow for thousands)."""
    now = timezone.now()
    defaults = {"gpu": 1, "cpu_milli": 1000, "memory_mib": 4096, "runtime_s": 60}
    defaults.update(fields)
    jobs = Job.objects.bulk_create(
        Job(
            owner=world.users[owner],
            team=world.teams[team],
            local_queue=world.queues[team],
            image="nvcr.io/nvidia/pytorch:24.08-py3",
            priority_class=world.priorities["default"],
            **defaults,
        )
        for _ in range(count)
    )
    JobTransition.objects.bulk_create(
        JobTransition(job=job, from_state="", to_state=JobState.PENDING, at=now, reason="submitted", actor=owner)
        for job in jobs
    )
    return [job.pk for job in jobs]
