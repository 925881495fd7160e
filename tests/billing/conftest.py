"""Billing fixtures and helpers: jobs with a given Running history, an independent GPU-hour
recomputation, a generated month of usage, API and page clients, spend and prices."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
from django.db.models import Sum
from django.utils import timezone

from billing.models import Budget, PriceBookEntry, UsageHourly
from billing.services import budget_check, metering_run
from portal.jobs.models import Job, JobTransition
from portal.jobs.states import JobState
from portal.jobs.transitions import job_transition


@pytest.fixture(autouse=True)
def _histories_need_no_configured_fit(settings):
    """Billing tests write recorded histories on any GPU model and MIG profile, whatever nodes the test
    world has: the submit service's "never fits as configured" refusal does not apply to them."""
    settings.QUEUE_NEVER_FITTING_JOBS = True


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


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


OCTOBER = "2026-10-01T00:00:00Z,2026-11-01T00:00:00Z"
OCT_START, OCT_END = utc(2026, 10, 1), utc(2026, 11, 1)
MIG = ["1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]


def get_json(client, **params):
    response = client.get("/api/v1/cost/allocation", params)
    assert response.status_code == 200, response.content
    return json.loads(response.content, parse_float=Decimal)


def generated_month(world, seed: int = 6) -> list[History]:
    """About 80 jobs over October (some starting in September) with preemptions, fractions and MIG."""
    rng = random.Random(seed)
    histories = []
    for _ in range(80):
        kind = rng.choice(["gpu", "milli", "mig", "cpu"])
        spec: dict[str, Any] = {
            "gpu": 0,
            "replicas": rng.choice([1, 1, 2, 3]),
            "cpu_milli": rng.choice([500, 2000, 8000]),
        }
        if kind == "gpu":
            spec["gpu"] = rng.choice([1, 2, 4, 8])
        elif kind == "milli":
            spec["gpu_milli"] = rng.choice([125, 250, 333, 500, 750])
        elif kind == "mig":
            spec["mig_profile"] = rng.choice(MIG)
        cursor = (
            OCT_START
            - timedelta(days=2)
            + timedelta(seconds=rng.randrange(33 * 86_400), microseconds=rng.randrange(10**6))
        )
        runs = []
        for _ in range(rng.choice([1, 1, 2, 3])):  # 2-3 runs: preempted and requeued in between
            length = timedelta(seconds=rng.randrange(60, 40 * 3600), microseconds=rng.randrange(10**6))
            model, ctype = rng.choice([("A100-80GB", "on-demand"), ("A100-80GB", "spot"), ("T4", "spot")])
            if kind == "mig":
                model = "A100-80GB"
            runs.append(Run(cursor, cursor + length, model, ctype))
            cursor += length + timedelta(minutes=rng.randrange(1, 600))
        final = rng.choice([JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED])
        histories.append(run_job(world, team=rng.choice(["vision", "nlp"]), runs=runs, final=final, **spec))
    return histories


def a100_price() -> Decimal:
    return PriceBookEntry.objects.get(resource="gpu", gpu_model="A100-80GB", capacity_type="on-demand").usd_per_hour


def spend_this_month(world, *, gpu_hours: int, team: str = "vision") -> None:
    now = timezone.now()
    start = max(now.replace(day=1, hour=0, minute=0, second=0, microsecond=0), now - timedelta(hours=3))
    run_job(world, team=team, gpu=gpu_hours, runs=[Run(start, start + timedelta(hours=1))])
    metering_run()


def over_a_hard_stop_budget(world) -> None:
    """Vision spends 4 GPU-hours this month against a $1 hard-stop budget; the budget check has run."""
    now = timezone.now()
    start = max(now.replace(day=1, hour=0, minute=0, second=0, microsecond=0), now - timedelta(hours=3))
    run_job(world, gpu=4, runs=[Run(start, start + timedelta(hours=1))])
    metering_run()
    Budget.objects.create(team=world.teams["vision"], monthly_gpu_usd=Decimal(1), hard_stop=True)
    budget_check()


@pytest.fixture
def _locmem_mail(settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"


@pytest.fixture
def logged_in(client, world):
    def login(username: str):
        client.login(username=username, password=f"pw-{username}")
        return client

    return login


def rollup_totals() -> dict:
    return UsageHourly.objects.aggregate(
        gpu=Sum("gpu_usage"), cpu=Sum("cpu_milli_us"), mem=Sum("memory_mib_us"), util=Sum("gpu_util_usage")
    )
