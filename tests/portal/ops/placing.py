"""Putting jobs on the simulated cluster's nodes by hand (the cycle's own write, without the cycle)."""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from portal.jobs.models import GpuModel, Job
from portal.jobs.transitions import job_transition
from scheduling.engine.model import ReplicaPlacement


def place(
    job: Job,
    node: str,
    devices: tuple[int, ...],
    *,
    milli: int = 1000,
    mig: str | None = None,
    slot: int | None = None,
    model: str = "A100-80GB",
    at: datetime | None = None,
) -> Job:
    """Admit ``job`` (one replica) on ``node``'s ``devices`` and start it."""
    now = at or timezone.now()
    placement = ReplicaPlacement(node, devices, milli, mig, slot, job.cpu_milli, job.memory_mib)
    job.gpu_model = GpuModel.objects.get(name=model)
    job.save(update_fields=["gpu_model"])
    job_transition(job=job, to_state="Admitted", at=now, detail={"gpu_model": model}, placements=[placement])
    job_transition(job=job, to_state="Running", at=now)
    return job
