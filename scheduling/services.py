"""Scheduling services: one cycle (sync the cluster, snapshot, engine, apply) and the cluster sync.

``cycle_run`` steps:
1. Take the cycle lock; if another worker holds it, return (one cycle at a time across workers).
2. Apply what the cluster observed (jobs started, finished, evicted) with the cluster's timestamps.
3. Load a snapshot (database + cluster nodes), run the pure engine, apply the plan in one transaction.
4. Record the cycle's figures.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from datetime import datetime

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from portal.jobs.models import Job
from portal.jobs.services import job_transition
from portal.jobs.states import TRANSITIONS, JobState
from scheduling.adapters import orm
from scheduling.adapters.backends import ClusterBackend, Observation, cluster_backend
from scheduling.engine.cycle import run_cycle
from scheduling.engine.model import Policy
from scheduling.models import CycleRun

logger = logging.getLogger(__name__)

CYCLE_LOCK_KEY = 0x6770755F6379  # "gpu_cy": one advisory-lock id for the whole portal
_local_cycle_lock = threading.Lock()


@contextlib.contextmanager
def cycle_lock() -> Iterator[bool]:
    """Hold the portal-wide cycle lock; yields False when another process or thread holds it.

    PostgreSQL: a session advisory lock, so two workers never plan from the same snapshot and admit
    into the same free devices twice. SQLite (the single-process demo): a process-local lock.
    """
    if not _local_cycle_lock.acquire(blocking=False):
        yield False
        return
    try:
        if connection.vendor != "postgresql":
            yield True
            return
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [CYCLE_LOCK_KEY])
            acquired = cursor.fetchone()[0]
        try:
            yield acquired
        finally:
            if acquired:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_unlock(%s)", [CYCLE_LOCK_KEY])
    finally:
        _local_cycle_lock.release()


def observation_apply(obs: Observation) -> bool:
    """Apply one cluster observation if it is still news for the job's current attempt."""
    with transaction.atomic():
        job = Job.objects.select_for_update().select_related("gpu_model").filter(pk=obs.job_id).first()
        if job is None or job.attempt != obs.attempt or obs.state not in TRANSITIONS[job.state]:
            return False
        detail = {}
        if obs.state == JobState.RUNNING:
            admitted = job.transitions.filter(to_state=JobState.ADMITTED).order_by("-at", "-id").first()
            detail = dict(admitted.detail) if admitted else {}
        job_transition(job=job, to_state=obs.state, at=obs.at, reason=obs.reason, actor="cluster", detail=detail)
        return True


def cluster_sync(*, backend: ClusterBackend, now: datetime) -> int:
    applied = 0
    for obs in sorted(backend.observe(now=now), key=lambda o: (o.at, o.job_id)):
        applied += observation_apply(obs)
    return applied


def policy_from_settings() -> Policy:
    return Policy(placement=settings.PLACEMENT_POLICY, seed=settings.SCHEDULER_SEED)


def teams_blocked() -> tuple[tuple[str, str], ...]:
    """Teams that may not start new jobs (billing's budget hard stop)."""
    from billing.selectors import teams_over_budget

    return teams_over_budget()


def cycle_run(*, now: datetime | None = None, backend: ClusterBackend | None = None) -> CycleRun | None:
    backend = backend or cluster_backend()
    with cycle_lock() as acquired:
        if not acquired:
            logger.info("another scheduling cycle is running; skipping")
            return None
        now = now or timezone.now()
        started = time.perf_counter()
        cluster_sync(backend=backend, now=now)
        snapshot = orm.snapshot_load(backend=backend, teams_blocked=teams_blocked())
        plan = run_cycle(snapshot, policy_from_settings(), now.timestamp())
        counts = orm.plan_apply(plan=plan, snapshot=snapshot, now=now, backend=backend)
        allocated = sum(
            float(orm.placement_gpus(w.placements)) for w in snapshot.workloads if w.placements
        ) + sum(float(orm.placement_gpus(a.placements)) for a in plan.admissions)
        run = CycleRun.objects.create(
            started_at=now,
            duration_ms=(time.perf_counter() - started) * 1000,
            pending=counts["pending"],
            admitted=counts["admitted"],
            preempted=counts["preempted"],
            allocated_gpus=allocated,
            total_gpus=sum(n.gpu_count for n in snapshot.nodes),
        )
        logger.info(
            "cycle: %d admitted, %d preempted, %d pending in %.1f ms",
            counts["admitted"],
            counts["preempted"],
            counts["pending"],
            run.duration_ms,
        )
        return run
