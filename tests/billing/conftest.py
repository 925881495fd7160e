"""Billing fixtures: jobs with a given Running history, and an independent GPU-hour recomputation."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

import pytest

from portal.jobs.models import Job, JobTransition
from portal.jobs.states import JobState
from portal.jobs.transitions import job_transition


def utc(*args) -> datetime:
    return datetime(*args, tzinfo=UTC)


def share_of(job: Job) -> Fraction:
    """GPUs one replica holds, exactly: n, k/1000, or g/7 for a MIG slice (independent of billing)."""
    if job.gpu:
        return Fraction(job.gpu)
    if job.gpu_milli:
        return Fraction(job.gpu_milli, 1000)
    if job.mig_profile:
        return Fraction(int(job.mig_profile[0]), 7)
    return Fraction(0)


def detail_for(job: Job, *, gpu_model: str = "A100-80GB", capacity_type: str = "on-demand") -> dict:
    """Admission detail as the scheduler records it: shares summed over replicas, 6 decimals."""
    gpus = share_of(job) * job.replicas
    text = str((Decimal(gpus.numerator) / Decimal(gpus.denominator)).quantize(Decimal("0.000001")))
    return {
        "gpu_model": gpu_model if gpus else "",
        "gpus": text,
        "replicas": job.replicas,
        "capacity_type": capacity_type,
        "nodes": ["node-0"],
    }


@dataclass
class Run:
    start: datetime
    end: datetime | None  # None: still running
    gpu_model: str = "A100-80GB"
    capacity_type: str = "on-demand"


@dataclass
class History:
    job: Job
    runs: list[Run] = field(default_factory=list)


def run_job(world, *, team: str = "vision", runs: list[Run], final: str = JobState.SUCCEEDED, **spec) -> History:
    """Submit a job and write its history: each run admitted and Running at ``start``; every run but
    the last preempted and requeued at its ``end``; the last one ends in ``final`` (or keeps running)."""
    job = world.submit(team, **spec)
    # Submitted just before its first run (the history is ordered by time).
    submitted = runs[0].start - timedelta(minutes=1)
    JobTransition.objects.filter(job=job).update(at=submitted)
    Job.objects.filter(pk=job.pk).update(created_at=submitted)
    for index, run in enumerate(runs):
        detail = detail_for(job, gpu_model=run.gpu_model, capacity_type=run.capacity_type)
        job_transition(job=job, to_state=JobState.ADMITTED, at=run.start, detail=detail)
        job_transition(job=job, to_state=JobState.RUNNING, at=run.start, actor="cluster", detail=detail)
        if run.end is None:
            continue
        if index < len(runs) - 1:
            job_transition(job=job, to_state=JobState.PREEMPTED, at=run.end, reason="preempted")
            job_transition(job=job, to_state=JobState.PENDING, at=run.end, reason="requeued")
        else:
            job_transition(job=job, to_state=final, at=run.end, actor="cluster")
    return History(job, runs)


def exact_gpu_hours(histories: list[History], start: datetime, end: datetime, key) -> dict[str, Fraction]:
    """GPU-hours per key(history) from the job intervals alone, clipped to [start, end)."""
    out: dict[str, Fraction] = {}
    for history in histories:
        for run in history.runs:
            lo, hi = max(run.start, start), min(run.end or end, end)
            if lo >= hi:
                continue
            delta = hi - lo
            micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
            hours = share_of(history.job) * history.job.replicas * Fraction(micros, 3_600_000_000)
            k = key(history, run)
            out[k] = out.get(k, Fraction(0)) + hours
    return out


def rounded(value: Fraction, places: int = 6) -> Decimal:
    """Exact half-even rounding (``round`` of a Fraction is exact)."""
    return Decimal(round(value * 10**places)).scaleb(-places)


@pytest.fixture
def billing_world(world):
    return world
