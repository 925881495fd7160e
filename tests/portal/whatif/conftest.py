"""History made by the real control loop: jobs submitted at simulated times and scheduled by
``cycle_run`` on the simulated cluster, one cycle a tick, so ``JobAttempt`` rows are what the portal
itself records."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from portal.jobs.models import Job
from scheduling.adapters.simulated import SimulatedCluster
from scheduling.services import cycle_run

TICK_S = 60
T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Submission:
    at_tick: int
    team: str
    gpus: int
    runtime_ticks: int
    priority: str = "default"


def submissions(seed: int, *, count: int = 40, ticks: int = 100) -> list[Submission]:
    rng = random.Random(seed)
    return sorted(
        (
            Submission(
                at_tick=rng.randrange(ticks),
                team=rng.choice(["vision", "nlp"]),
                gpus=rng.choice([1, 2, 2, 4]),
                runtime_ticks=rng.randint(5, 30),
            )
            for _ in range(count)
        ),
        key=lambda s: s.at_tick,
    )


def record_history(world, plan: list[Submission], *, ticks: int) -> datetime:
    """Run the portal's loop over ``ticks`` cycles; returns the window's end (the last cycle)."""
    backend = SimulatedCluster(speedup=1.0)
    by_tick: dict[int, list[Submission]] = {}
    for s in plan:
        by_tick.setdefault(s.at_tick, []).append(s)
    for tick in range(ticks + 1):
        now = T0 + timedelta(seconds=tick * TICK_S)
        for s in by_tick.get(tick, []):
            job = world.submit(
                s.team, gpu=s.gpus, runtime_s=s.runtime_ticks * TICK_S, priority_class=world.priorities[s.priority]
            )
            Job.objects.filter(pk=job.pk).update(created_at=now)
        cycle_run(now=now, backend=backend)
    return T0 + timedelta(seconds=ticks * TICK_S)


@pytest.fixture
def tick_settings(settings):
    settings.SCHEDULER_INTERVAL_S = TICK_S
    settings.CYCLE_BATCH_S = 0.0  # record_history runs its cycle at the submissions' instant
    settings.SIM_SPEEDUP = 1.0
    settings.CLUSTER_BACKEND = "simulated"
    return settings
