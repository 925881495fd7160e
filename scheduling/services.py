"""Scheduling services: one cycle (sync the cluster, snapshot, engine, apply) and the cluster sync.

``cycle_run`` steps:
1. Take the cycle lock; if another worker holds it, ask it for one more cycle and return (one cycle at
   a time across workers). Count the cycle's start: writes from now on ask for another
   (``cycle_request_claim``); at its end, record its duration, which spaces the next requested one.
2. Apply what the cluster observed (jobs started, finished, evicted) with the cluster's timestamps,
   then let the backend converge (create pods missing for admitted jobs, delete orphaned pods).
3. Load a snapshot (database + cluster nodes), run the pure engine, apply the plan in one transaction
   that first checks the lock is still held (the fence).
4. Record the cycle's figures.

``jobs_sweep`` requeues jobs stuck in Admitted (pods never started) and converges the cluster too;
``cluster_sync_run`` is steps 1-2 alone. All three hold the same lock, so every write to job states
and every pod create or delete of the control loop is serialized across workers.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.utils import timezone
from redis.exceptions import RedisError

from portal.jobs.models import Job, JobTransition
from portal.jobs.states import TRANSITIONS, JobState
from portal.jobs.transitions import job_transition, jobs_running
from portal.notifications.services.notify import job_events_notify
from portal.tenants.selectors import team_holds
from scheduling.adapters import apply
from scheduling.adapters.contract import ClusterBackend, Observation
from scheduling.adapters.factory import cluster_backend
from scheduling.adapters.k8s.namespaces import namespace_manifest
from scheduling.dry_run import dry_run_publish, dry_run_to_publish
from scheduling.engine.cycle import run_cycle
from scheduling.engine.dryrun import DryRun
from scheduling.engine.provisioning import capacity_requests, with_capacity_requests
from scheduling.models import CycleRun, NamespaceObject
from scheduling.selectors import namespace_objects_wanted, policy_from_settings, snapshot_for_cycle

logger = logging.getLogger(__name__)

CYCLE_LOCK_KEY = 0x6770755F6379  # "gpu_cy": one advisory-lock id for the whole portal
_local_cycle_lock = threading.Lock()
_holding = threading.local()


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
            if acquired:
                # Names the holder in pg_stat_activity (operators, and the crash test, find it there).
                cursor.execute(
                    "SELECT set_config('application_name', %s, false)", [f"gpu-portal cycle pid={os.getpid()}"]
                )
        _holding.value = acquired
        try:
            yield acquired
        finally:
            _holding.value = False
            if acquired:
                try:
                    with connection.cursor() as cursor:
                        cursor.execute("SELECT pg_advisory_unlock(%s)", [CYCLE_LOCK_KEY])
                        cursor.execute("SELECT set_config('application_name', '', false)")
                except DatabaseError:
                    # The session is gone, and with it the lock: nothing left to release.
                    logger.warning("cycle lock: connection lost before unlock")
    finally:
        _local_cycle_lock.release()


def cycle_lock_held() -> bool:
    """The fence: whether this database session still holds the cycle lock, checked inside the
    transaction that writes a plan. A session that lost its connection (and so its lock) while
    another worker took over cannot commit a plan computed from its stale snapshot."""
    if connection.vendor != "postgresql":
        return True  # SQLite: one process, the thread lock is the whole story
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND pid = pg_backend_pid() AND ((classid::bigint << 32) | objid::bigint) = %s)",
            [CYCLE_LOCK_KEY],
        )
        return bool(cursor.fetchone()[0])


# -- coordination through Redis (absent in the embedded demo: then every check says "go ahead") ------

CYCLE_AGAIN_KEY = "gpu-portal:cycle-again"
PERIODIC_KEY = "gpu-portal:periodic:{name}"
_redis_clients: dict[str, object] = {}


def redis_client():
    """The Redis named by REDIS_URL, or None. Short socket timeouts: coordination must not hang a worker."""
    if not settings.REDIS_URL:
        return None
    client = _redis_clients.get(settings.REDIS_URL)
    if client is None:
        import redis

        client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
        _redis_clients[settings.REDIS_URL] = client
    return client


def cycle_key(name: str) -> str:
    """The Redis key ``name`` of this portal's database: portals (or test runs) that share a Redis
    database do not take each other's cycle requests."""
    return f"{name}:{connection.settings_dict['NAME']}"


def cycle_again_request() -> None:
    """Ask the running cycle for one more: work that arrived after its snapshot is not lost."""
    client = redis_client()
    if client is not None:
        client.set(cycle_key(CYCLE_AGAIN_KEY), "1", ex=max(60, int(settings.SCHEDULER_INTERVAL_S * 6)))


CYCLE_REQUESTED_KEY = "gpu-portal:cycle-requested"
# The cycles' counts and timing, one hash: ``started`` (cycles started so far), ``done`` (the count of
# the last cycle that ran to its end), ``started_s`` (wall time of the last start) and ``spacing_s``
# (the least time from one requested cycle's start to the next, from the last cycle's duration).
CYCLE_STATE_KEY = "gpu-portal:cycle-state"


@dataclass(frozen=True, slots=True)
class CycleRequest:
    """A write's claim on the next cycle: enqueue ``scheduling_cycle_task(requested=generation)``
    ``countdown_s`` from now. ``generation``: cycles started when the claim was made (None without
    Redis); any cycle started after it takes the writes the claim covers."""

    generation: int | None
    countdown_s: float


def cycle_request_countdown(*, started_s: float | None, spacing_s: float | None, now_s: float) -> float:
    """Seconds until a requested cycle may start: ``CYCLE_BATCH_S`` (a burst of writes shares it), or
    longer while the last cycle's start is nearer than ``spacing_s`` (requested cycles take at most
    ``CYCLE_REQUEST_SHARE`` of a worker's time), never longer than ``SCHEDULER_INTERVAL_S`` (beat's
    cycle would come first; without beat, the request still does)."""
    wait_s = 0.0
    if started_s is not None and spacing_s is not None:
        wait_s = started_s + spacing_s - now_s
    return max(settings.CYCLE_BATCH_S, min(wait_s, settings.SCHEDULER_INTERVAL_S))


def _float(value: object) -> float | None:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def cycle_request_claim() -> CycleRequest | None:
    """Whether a write should enqueue a cycle, and when: None while a requested cycle has not started
    yet (it will take this write too).

    A burst of submissions would otherwise enqueue a cycle each, and the worker would run them one
    after the other long after the first had admitted everything. The key is cleared when a cycle
    starts (``cycle_run``), so work arriving after a cycle's snapshot always asks for another; it
    lives past the claim's countdown, expires on its own if the queued cycle is lost, and beat's
    periodic cycle runs regardless. The claim and the count it reads are one transaction, so a
    cycle's start (which clears the key and counts itself, also one transaction) is either before
    both or after both."""
    client = redis_client()
    if client is None:
        return CycleRequest(None, settings.CYCLE_BATCH_S)
    ttl_s = max(5, int(settings.SCHEDULER_INTERVAL_S * 3))  # > the countdown, at most the interval
    pipe = client.pipeline(transaction=True)
    pipe.set(cycle_key(CYCLE_REQUESTED_KEY), "1", nx=True, ex=ttl_s)
    pipe.hmget(cycle_key(CYCLE_STATE_KEY), "started", "started_s", "spacing_s")
    claimed, (started, started_s, spacing_s) = pipe.execute()
    if not claimed:
        return None
    countdown_s = cycle_request_countdown(started_s=_float(started_s), spacing_s=_float(spacing_s), now_s=time.time())
    return CycleRequest(int(started or 0), countdown_s)


def cycle_again_countdown() -> float:
    """Seconds until the one more cycle the running one was asked for (``cycle_again_request``)."""
    client = redis_client()
    state: list[object] = [None, None]
    if client is not None:
        with contextlib.suppress(RedisError):
            state = client.hmget(cycle_key(CYCLE_STATE_KEY), "started_s", "spacing_s")
    return cycle_request_countdown(started_s=_float(state[0]), spacing_s=_float(state[1]), now_s=time.time())


def cycle_request_taken(generation: int) -> bool:
    """Whether a cycle that started after a claim made at ``generation`` has run to its end (so the
    requested cycle would only repeat it). A cycle that died midway does not count: its batch still
    gets the requested one. Unknown (Redis down or emptied) counts as not taken."""
    client = redis_client()
    if client is None:
        return False
    try:
        done = _float(client.hget(cycle_key(CYCLE_STATE_KEY), "done"))
    except RedisError:
        return False
    return done is not None and done > generation


def cycle_request_clear() -> int | None:
    """A cycle starts: writes from now on ask for another. Returns its count (None without Redis)."""
    client = redis_client()
    if client is None:
        return None
    try:
        pipe = client.pipeline(transaction=True)
        pipe.delete(cycle_key(CYCLE_REQUESTED_KEY))
        pipe.hincrby(cycle_key(CYCLE_STATE_KEY), "started", 1)
        pipe.hset(cycle_key(CYCLE_STATE_KEY), "started_s", repr(time.time()))
        return int(pipe.execute()[1])
    except RedisError:
        logger.warning("could not clear the cycle request; it expires on its own")
        return None


def cycle_request_done(*, generation: int | None, duration_s: float) -> None:
    """A cycle counted ``generation`` ran to its end in ``duration_s``: the claims made before its
    start are taken, and the next requested cycle waits ``duration_s / CYCLE_REQUEST_SHARE`` from
    its start (0: no wait beyond ``CYCLE_BATCH_S``)."""
    client = redis_client()
    if client is None or generation is None:
        return
    share = settings.CYCLE_REQUEST_SHARE
    spacing_s = duration_s / share if share > 0 else 0.0
    try:
        client.hset(cycle_key(CYCLE_STATE_KEY), mapping={"done": generation, "spacing_s": repr(spacing_s)})
    except RedisError:
        logger.warning("could not record the cycle's end; requested cycles run anyway")


def cycle_again_clear() -> None:
    client = redis_client()
    if client is not None:
        client.delete(cycle_key(CYCLE_AGAIN_KEY))


def cycle_again_pop() -> bool:
    client = redis_client()
    return client is not None and bool(client.delete(cycle_key(CYCLE_AGAIN_KEY)))


def periodic_claim(name: str, interval_s: float) -> bool:
    """Whether this run of periodic task ``name`` should go ahead: at most one per interval.

    Celery beat sends a task again when it restarts (its schedule file starts over) and twice when two
    beats overlap during a rollout. The first run of an interval sets a key that lives 90% of the
    interval (SET NX EX is atomic), so a duplicate that arrives inside the interval is dropped.
    """
    client = redis_client()
    if client is None:
        return True
    ttl_ms = max(1, int(interval_s * 900))
    return bool(client.set(PERIODIC_KEY.format(name=name), str(os.getpid()), nx=True, px=ttl_ms))


# The periodic tasks' names for ``periodic_claim`` (beat's schedule entries).
SCHEDULING_CYCLE = "scheduling-cycle"
CLUSTER_SYNC = "cluster-sync"


def periodic_covered(name: str, interval_s: float) -> None:
    """Work has just been done that periodic task ``name``'s run of the current interval would only
    repeat (a cycle started: beat's cycle; a cycle synced the cluster: beat's sync), so that run is
    dropped as a duplicate is. While submissions keep cycles coming, beat's would otherwise run
    between them, each reading every job again. Best effort: without Redis the run goes ahead."""
    try:
        periodic_claim(name, interval_s)
    except RedisError as exc:
        logger.warning("could not mark periodic %s done (%s); it runs anyway", name, exc)


OBSERVATION_BATCH = 200


def observations_apply(observations: list[Observation]) -> int:
    """Apply observations (in the given order), a batch per transaction; returns how many were news.

    The batch's job rows are locked in id order (no deadlock with another locker of several rows)
    and each observation is re-checked against the locked row: a stale report about an earlier
    attempt, or one the state table does not allow (a cancelled job reported running), is dropped.
    """
    applied = 0
    for start in range(0, len(observations), OBSERVATION_BATCH):
        batch = observations[start : start + OBSERVATION_BATCH]
        ids = sorted({o.job_id for o in batch})
        with transaction.atomic():
            jobs = {
                job.pk: job
                for job in Job.objects.select_for_update(of=("self",))
                .select_related("gpu_model")
                .filter(pk__in=ids)
                .order_by("pk")
            }
            running_ids = [o.job_id for o in batch if o.state == JobState.RUNNING]
            # Ordered so the last admission of each job wins.
            admitted_detail: dict[int, dict] = dict(
                JobTransition.objects.filter(job_id__in=running_ids, to_state=JobState.ADMITTED)
                .order_by("job_id", "at", "id")
                .values_list("job_id", "detail")
            )
            moved = []
            # A job reported only started in this batch (most, as a cluster fills) is written with the
            # others (``jobs_running``: the same rows); one with more news goes through them in order.
            reports = Counter(o.job_id for o in batch)
            starts = []
            for obs in batch:
                job = jobs.get(obs.job_id)
                if job is None or job.attempt != obs.attempt or obs.state not in TRANSITIONS[job.state]:
                    continue
                detail = dict(admitted_detail.get(job.pk) or {}) if obs.state == JobState.RUNNING else {}
                to_state, reason = obs.state, obs.reason
                if obs.worker_failed and job.kind == Job.Kind.TRAINING:
                    to_state, reason = gang_restart_decide(job=job, why=obs.reason)
                if to_state == JobState.RUNNING and reports[job.pk] == 1:
                    starts.append((job, obs.at, reason, detail))
                else:
                    job_transition(job=job, to_state=to_state, at=obs.at, reason=reason, actor="cluster", detail=detail)
                moved.append(job.pk)
                applied += 1
            jobs_running(starts=starts, actor="cluster")
            job_events_notify(job_ids=moved)  # started, finished, failed, evicted: after commit
    return applied


def gang_restart_decide(*, job: Job, why: str) -> tuple[str, str]:
    """A training worker failed: the whole gang goes back to the queue (its other workers' pods are
    deleted by reconcile, as pods of a requeued job are) until ``max_restarts`` restarts were spent,
    then the job fails with the reason. Counts the restart on the row; the caller holds its lock."""
    if job.restarts >= job.max_restarts:
        spent = f"after {job.restarts} gang restart{'s' if job.restarts != 1 else ''}" if job.restarts else ""
        return JobState.FAILED, f"worker failed: {why}; restart limit {job.max_restarts} reached {spent}".rstrip()
    job.restarts += 1
    job.save(update_fields=["restarts"])
    reason = f"worker failed: {why}; whole gang restarted ({job.restarts} of {job.max_restarts}){job.resume_hint()}"
    return JobState.PENDING, reason


def cluster_sync(*, backend: ClusterBackend, now: datetime, converge: bool = True) -> int:
    """Apply the cluster's observations in time order, then let the backend converge on the database.

    Callers hold the cycle lock (``cycle_run``, ``cluster_sync_run``, ``jobs_sweep``) or own the
    database alone (tests). Returns the number of observations applied.
    """
    applied = observations_apply(sorted(backend.observe(now=now), key=lambda o: (o.at, o.job_id)))
    observed = getattr(backend, "observed", None)
    if observed is not None:
        observed()  # applied: a backend that observes what changed need not look at it again
    reconcile = getattr(backend, "reconcile", None)
    if converge and reconcile is not None:
        reconcile(now=now)
    return applied


def cluster_sync_run(*, now: datetime | None = None, backend: ClusterBackend | None = None) -> int | None:
    """``cluster_sync`` under the cycle lock; None when a cycle (which syncs too) is running."""
    backend = backend or cluster_backend()
    with cycle_lock() as acquired:
        if not acquired:
            return None
        return cluster_sync(backend=backend, now=now or timezone.now())


def namespaces_sync_run(*, now: datetime | None = None, backend: ClusterBackend | None = None) -> list | None:
    """Bring every team namespace's ResourceQuota and LimitRange in step with the queues (a backend
    with namespaces only: Kubernetes), and record what each object looked like and what was done
    (``NamespaceObject``: the cluster page and /metrics show it). None on a backend without them.

    No cycle lock: it reads queues and writes only these objects and rows, so it never races a cycle.
    """
    backend = backend or cluster_backend()
    hook = getattr(backend, "namespaces_sync", None)
    if hook is None or not settings.K8S_NAMESPACE_OBJECTS:
        return None
    now = now or timezone.now()
    wanted = namespace_objects_wanted()
    reports = hook(wanted)
    manifests = {o.namespace: o for o in wanted}
    with transaction.atomic():
        for report in reports:
            repaired = report.action in ("created", "replaced")
            row, _ = NamespaceObject.objects.select_for_update().get_or_create(
                namespace=report.namespace, kind=report.kind, defaults={"name": report.name, "checked_at": now}
            )
            row.name, row.checked_at = report.name, now
            row.in_sync, row.drift, row.action = not report.drift, list(report.drift), report.action
            row.wanted = namespace_manifest(manifests[report.namespace], report.kind)
            if repaired:
                row.repairs += 1
                row.repaired_at = now
            row.save()
        NamespaceObject.objects.exclude(namespace__in=list(manifests)).delete()
    drifted = [r for r in reports if r.drift]
    if drifted:
        logger.warning(
            "namespaces: %d object(s) out of step: %s",
            len(drifted),
            "; ".join(f"{r.namespace} {r.kind} {', '.join(r.drift)} -> {r.action}" for r in drifted)[:2000],
        )
    return reports


def jobs_sweep(*, now: datetime | None = None, backend: ClusterBackend | None = None) -> int | None:
    """Requeue jobs admitted longer than ``ADMITTED_TIMEOUT_S`` ago whose pods never ran.

    Such a job holds quota (borrowed quota too) and devices without running: an image that never
    pulls, a node that refuses the pod. As Kueue's waitForPodsReady does, its pods are deleted and it
    goes back to Pending with an exponential back-off (``ADMITTED_BACKOFF_BASE_S`` doubling per failed
    start, at most ``ADMITTED_BACKOFF_MAX_S``); after ``ADMITTED_REQUEUE_LIMIT`` requeues, or at once if
    its restart policy is ``never``, it fails with the reason. The time held is added to the job's
    ``quota_held_s`` (shown on the job, counted per queue in /metrics). Then the cluster is converged.
    None when a cycle holds the lock.
    """
    backend = backend or cluster_backend()
    now = now or timezone.now()
    with cycle_lock() as acquired:
        if not acquired:
            return None
        cluster_sync(backend=backend, now=now)
        cutoff = now - timedelta(seconds=settings.ADMITTED_TIMEOUT_S)
        swept = 0
        for job_id in Job.objects.filter(state=JobState.ADMITTED, admitted_at__lt=cutoff).values_list("id", flat=True):
            with transaction.atomic():
                # Re-checked under the row lock: the job may have started since the query.
                job = Job.objects.select_for_update(of=("self",)).filter(pk=job_id, state=JobState.ADMITTED).first()
                if job is None or job.admitted_at is None or job.admitted_at >= cutoff:
                    continue
                transaction.on_commit(partial(backend.stop, job_id=job.pk, grace_s=0))
                start_failure_record(job=job, now=now)
                job_events_notify(job_ids=[job.pk])  # a job that fails here is told so
                swept += 1
        return swept


def start_backoff_s(failures: int) -> float:
    """Back-off after the ``failures``-th failed start: base, doubling, capped."""
    return min(settings.ADMITTED_BACKOFF_MAX_S, settings.ADMITTED_BACKOFF_BASE_S * 2 ** max(0, failures - 1))


def start_failure_record(*, job: Job, now: datetime) -> None:
    """Move an admitted job whose pods never ran back to Pending with a back-off, or to Failed.

    The caller holds the job's row lock."""
    assert job.admitted_at is not None
    held_s = max(0.0, (now - job.admitted_at).total_seconds())
    failures = job.start_failures + 1
    limit = settings.ADMITTED_REQUEUE_LIMIT
    why = f"pods not running {settings.ADMITTED_TIMEOUT_S:g} s after admission"
    detail: dict[str, object] = {"held_s": round(held_s, 3), "start_failures": failures}
    job.start_failures = failures
    job.quota_held_s += held_s
    fields = ["start_failures", "quota_held_s"]
    if job.restart_policy != Job.RestartPolicy.REQUEUE or failures > limit:
        attempts = "once" if failures == 1 else f"{failures} times"
        job_transition(
            job=job, to_state=JobState.FAILED, at=now, reason=f"{why} ({attempts}); not retried", detail=detail
        )
    else:
        backoff_s = start_backoff_s(failures)
        job.not_before = now + timedelta(seconds=backoff_s)
        detail.update(not_before=job.not_before.isoformat(), backoff_s=backoff_s)
        reason = f"{why}; requeued, retried after a {backoff_s:g} s back-off ({failures} of {limit} requeues)"
        job_transition(job=job, to_state=JobState.PENDING, at=now, reason=reason, detail=detail)
        job.pending_reason = {
            "kind": "backoff",
            "message": f"waiting out a {backoff_s:g} s back-off after its pods did not start",
            "details": {"not_before": job.not_before.isoformat(), "start_failures": failures},
            "waits": True,
        }
        job.queue_position = None
        job.estimated_start = job.not_before
        fields += ["not_before", "pending_reason", "queue_position", "estimated_start"]
    job.save(update_fields=fields)


def teams_blocked() -> tuple[tuple[str, str], ...]:
    """Teams that may not start new jobs: their holds (billing's budget check writes the hard stop's)."""
    return team_holds()


def cycle_run(*, now: datetime | None = None, backend: ClusterBackend | None = None) -> CycleRun | None:
    backend = backend or cluster_backend()
    with cycle_lock() as acquired:
        if not acquired:
            logger.info("another scheduling cycle is running; asking it for one more")
            cycle_again_request()
            return None
        cycle_again_clear()
        generation = cycle_request_clear()  # work arriving from now on asks for (and gets) another cycle
        periodic_covered(SCHEDULING_CYCLE, settings.SCHEDULER_INTERVAL_S)
        now = now or timezone.now()
        started = time.perf_counter()
        steps = StepClock()
        cluster_sync(backend=backend, now=now)
        periodic_covered(CLUSTER_SYNC, settings.CLUSTER_SYNC_INTERVAL_S)
        steps.lap("sync")
        snapshot = snapshot_for_cycle(backend=backend, now=now)
        steps.lap("snapshot")
        policy = policy_from_settings()
        # The same cycle, kept as a dry-run state when the web processes asked for a newer one.
        dry_run = DryRun(snapshot, policy, now.timestamp()) if dry_run_to_publish() else None
        plan = dry_run.plan if dry_run is not None else run_cycle(snapshot, policy, now.timestamp())
        steps.lap("engine")
        # The capacity signal: the nodes that would let each job waiting for capacity start.
        plan = with_capacity_requests(plan, capacity_requests(snapshot, plan, policy))
        steps.lap("provisioning")
        counts = apply.plan_apply(
            plan=plan, snapshot=snapshot, now=now, backend=backend, fence=cycle_lock_held,
            committed=partial(steps.lap, "apply"),  # the plan's transaction
        )  # fmt: skip
        job_events_notify(job_ids=[int(p.workload_id) for p in plan.preemptions])  # committed: enqueued now
        steps.lap("start")  # after commit: the admitted jobs' pods created and bound, the victims' deleted
        allocated = sum(float(apply.placement_gpus(w.placements)) for w in snapshot.workloads if w.placements) + sum(
            float(apply.placement_gpus(a.placements)) for a in plan.admissions
        )
        run = CycleRun.objects.create(
            started_at=now,
            duration_ms=(time.perf_counter() - started) * 1000,
            pending=counts["pending"],
            admitted=counts["admitted"],
            preempted=counts["preempted"],
            allocated_gpus=allocated,
            total_gpus=sum(n.gpu_count for n in snapshot.nodes),
        )
        if dry_run is not None:
            dry_run_publish(dry_run=dry_run, cycle_id=run.id, as_of=now)
            steps.lap("handover")
        cycle_request_done(generation=generation, duration_s=time.perf_counter() - started)
        # A cycle that changed nothing is routine (every few seconds): keep it out of INFO logs.
        logger.log(
            logging.INFO if counts["admitted"] or counts["preempted"] else logging.DEBUG,
            "cycle: %d admitted, %d preempted, %d pending in %.1f ms",
            counts["admitted"],
            counts["preempted"],
            counts["pending"],
            run.duration_ms,
        )
        logger.log(
            logging.INFO if counts["admitted"] or counts["preempted"] else logging.DEBUG, "cycle steps: %s", steps
        )
        return run


class StepClock:
    """Milliseconds per named step of a cycle, for the log (``sync=3.1ms snapshot=40.2ms ...``)."""

    def __init__(self) -> None:
        self.last = time.perf_counter()
        self.laps: list[tuple[str, float]] = []

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps.append((name, (now - self.last) * 1000))
        self.last = now

    def __str__(self) -> str:
        return " ".join(f"{name}={ms:.1f}ms" for name, ms in self.laps)
