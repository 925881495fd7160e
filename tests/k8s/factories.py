"""Bulk rows for the control-loop tests (the root ``tests/factories.py`` builds the world)."""

from __future__ import annotations

from django.utils import timezone

from portal.jobs.models import Job, JobTransition
from portal.jobs.states import JobState
from tests.factories import World


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
