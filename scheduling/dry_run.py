"""The dry run's state and answers, kept between requests (``job_check``: what the check endpoint and
a submission's answer ask the engine).

1. The state: one cycle over the current snapshot (``scheduling.engine.dryrun.DryRun``), as the
   scheduler runs it. It is current until a scheduling cycle has run since or it is
   ``DRY_RUN_TTL_S`` old (nodes change without rows); a job submitted in between is seen by the next
   cycle, and by dry runs from then on. A state no longer current is rebuilt: behind the requests
   (``DRY_RUN_REFRESH_BEHIND``: they are answered from the kept state meanwhile, as of its time,
   while it is at most ``DRY_RUN_STALE_S`` old; and not more often than every
   ``DRY_RUN_REFRESH_EVERY_S``, nor than its own cost allows: a process spends at most
   ``DRY_RUN_CPU_SHARE`` of its CPU time on a state, getting it and computing answers on it, so a
   state that took 2 s of CPU is refreshed at most every 20 s at 10 %), else in the request.
2. Shared by the web processes through the default cache (Redis in production): the first process
   that needs the state of a cycle builds it (the others wait for it, up to ``DRY_RUN_WAIT_S``) and
   stores it pickled; the others load it instead of running the cycle again. Without a shared cache
   (a cache other than Redis) each process builds its own.
3. Jobs submitted since the state's snapshot was read are not in it: each check reads the ids of
   those still live (one indexed query: pending, or admitted since by a newer cycle while this state
   still answers), loads those it has not seen yet (kept per state), and the engine decides them
   before the job (``scheduling.engine.dryrun``, step 5), so a burst of submissions is not each told
   the same free room.
4. The answers, per request shape and later jobs, on that state: the engine is a function of the state and the
   request, and a request's ``created_at`` (its submission time) only orders it among the queued
   jobs, so two requests that differ in nothing else, both newer than every job of the state, get
   the same answer. Kept in the process and in the shared cache, dropped with the state.

5. Handed over by the scheduler: with a shared cache, a process that needs a newer state says so
   (``WANTED``, for ``DRY_RUN_STALE_S``), or none was handed over within ``DRY_RUN_STALE_S`` (a web
   process that starts takes it instead of running a cycle in its first check), and the scheduler's
   next cycle, at most every ``DRY_RUN_REFRESH_EVERY_S``, runs as a ``DryRun`` (the same cycle, its
   plan applied as always) and stores its final state under its own cycle's key
   (``dry_run_publish``): the web processes load it
   instead of reading a snapshot and running the cycle again. Until a newer one is handed over, the
   last one handed over (``LATEST``) answers while it is younger than ``DRY_RUN_STALE_S``; a process
   builds a state itself only when there is none (no scheduler running, ``DRY_RUN_PUBLISH`` off, or
   a cache other than Redis). A shared state's ``built_at`` is stored beside it and read first: a
   state the process would refuse (too old) is never unpickled (~1-2 MB, 0.1-0.3 s of CPU holding
   the GIL, a stall for every request of the process). A look behind the requests that found nothing
   newer is repeated at most every ``RETRY_S``, not by every request.

Everything shared is best effort: a cache that fails or has been emptied costs a rebuild, never a
different answer.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from django.conf import settings
from django.core.cache import cache, caches
from django.core.cache.backends.redis import RedisCache
from django.db import connection as db_connection
from django.utils import timezone

from portal.jobs.models import Job, JobState
from portal.prepared import Prepared
from scheduling.adapters.contract import ClusterBackend, node_capacity_type
from scheduling.adapters.factory import cluster_backend
from scheduling.adapters.workloads import workload_from_job
from scheduling.engine.collector import collector_paused
from scheduling.engine.dryrun import Check, DryRun, Suggestion
from scheduling.engine.model import Workload, WorkloadState
from scheduling.models import CycleRun
from scheduling.selectors import expected_runtimes, policy_from_settings, runtime_speedup, snapshot_for_cycle

logger = logging.getLogger(__name__)

DRY_RUN_WAIT_S = 30.0  # at most, a process waits this long for another that builds the same state
RETRY_S = 1.0  # after a look for a newer state found none, a process looks again no sooner than this
ANSWERS_KEPT = 256  # request shapes remembered per state in a process
SHARED = "dry-run:v1"  # cache key prefix
WANTED = f"{SHARED}:wanted"  # a web process asked for a newer state (step 5)
PUBLISHED = f"{SHARED}:published"  # the scheduler handed one over within DRY_RUN_REFRESH_EVERY_S
LATEST = f"{SHARED}:latest"  # the key of the last state the scheduler handed over


@dataclass(frozen=True, slots=True)
class JobCheck:
    """A dry run's answer with what the caller needs to price and word it."""

    check: Check
    suggestions: tuple[Suggestion, ...]
    as_of: datetime
    capacity_type: str  # of the nodes it would run on (on-demand when they differ or none)


@dataclass(frozen=True, slots=True)
class _State:
    """What is shared: one cycle's final state and where it came from."""

    key: tuple[object, ...]  # the last cycle's id and the backend when it was built
    state_id: str  # names the answers kept on it
    built_at: float  # time.time()
    as_of: datetime
    dry_run: DryRun
    newest_created_at: float  # of the snapshot's workloads (-inf for none)


@dataclass(slots=True)
class _Kept:
    state: _State
    # CPU seconds this process spent on the state: getting it (built, or loaded), then the answers it
    # computed on it (a check of a waiting job replays the forecast: ~1 s at 2,000 pending jobs)
    cost_s: float = 0.0
    looked_at: float = 0.0  # time.time() of the last look for a newer state that found none
    answers: dict[str, JobCheck] = field(default_factory=dict)
    # Step 3: the ids of the snapshot's jobs, and the later jobs loaded so far (id -> job, runtimes)
    known: frozenset[str] | None = None
    later: dict[str, tuple[Workload, tuple[float, float] | None]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)  # one dry run at a time on the state


_kept: dict[str, _Kept] = {}
_kept_lock = threading.Lock()  # guards _kept and _building
_building: set[tuple[object, ...]] = set()  # keys being built behind the requests


def _last_cycle_key() -> tuple[object, ...]:
    """Changes with every scheduling cycle (one indexed query: the newest cycle's id, None before any)."""
    last = _LAST_CYCLE.rows()
    return (last[0][0] if last else None, settings.CLUSTER_BACKEND)


_LAST_CYCLE = Prepared(lambda: CycleRun.objects.order_by("-id").values_list("id")[:1])


def _fresh(state: _State | None, key: tuple[object, ...]) -> bool:
    return state is not None and state.key == key and time.time() - state.built_at < settings.DRY_RUN_TTL_S


def _ttl() -> int:
    """Seconds a shared state or answer stays in the cache."""
    return int(settings.DRY_RUN_TTL_S) + 1


def _shared_key(key: tuple[object, ...]) -> str:
    return f"{SHARED}:state:{key[0]}:{key[1]}"


def _stamp_key(key: tuple[object, ...]) -> str:
    """The shared state's ``built_at``, stored beside it: a process reads it (a float) before the state
    (about a megabyte, 0.1-0.3 s of CPU to unpickle) and skips a state it would not take."""
    return f"{_shared_key(key)}:built-at"


def _share(state: _State, timeout: int) -> None:
    _cache_call("set", _shared_key(state.key), state, timeout=timeout)
    _cache_call("set", _stamp_key(state.key), state.built_at, timeout=timeout)  # after the state


def _cache_call(method: str, *args, **kwargs):
    """``cache.<method>(...)`` when the default cache is shared by processes (Redis), else None: a
    process-local cache would only pickle the state (its cost grows with the jobs' specs) for nothing."""
    if not isinstance(caches["default"], RedisCache):
        return None
    try:
        return getattr(cache, method)(*args, **kwargs)
    except Exception as exc:  # a shared cache that fails costs a rebuild, not the answer
        logger.warning("dry run: shared cache %s failed (%s)", method, exc)
        return None


def _loaded(shared_key: str) -> object:
    """The shared state under ``shared_key`` (None: none), unpickled with the garbage collector paused.

    The state is some 100,000 objects (a few thousand workloads, their resources and placements,
    the recorded forecast runs). Made one by one with the collector running, they set off several
    collections of its oldest generation, each of which traverses every object of the web process
    (Django's, the kept state's): three times the unpickling itself (0.21 against 0.075 s of CPU at
    2,000 pending jobs), all of it holding the GIL, a stall for every request of the process."""
    with collector_paused():
        return _cache_call("get", shared_key)


def _shared_state(key: tuple[object, ...]) -> _State | None:
    built_at = _cache_call("get", _stamp_key(key))
    if not isinstance(built_at, float) or time.time() - built_at >= settings.DRY_RUN_TTL_S:
        return None  # none, or one ``_fresh`` refuses: not read
    state = _loaded(_shared_key(key))
    return state if isinstance(state, _State) and _fresh(state, key) else None


def _build(key: tuple[object, ...], backend: ClusterBackend | None) -> _State:
    """The state of ``key``: from another process if it built it, else built here and shared."""
    building = f"{_shared_key(key)}:building"
    claimed = _cache_call("add", building, 1, timeout=int(DRY_RUN_WAIT_S))
    if claimed is False:
        deadline = time.monotonic() + DRY_RUN_WAIT_S
        # Another process runs the cycle: wait for it while it builds (a loaded machine makes that
        # slow, and building here too would only take more of its CPU); build here if it gave up.
        while time.monotonic() < deadline and _cache_call("get", building) is not None:
            time.sleep(0.05)
            if (state := _shared_state(key)) is not None:
                return state
        if (state := _shared_state(key)) is not None:
            return state
    try:
        now = timezone.now()
        snapshot = snapshot_for_cycle(backend=backend or cluster_backend(), now=now)
        dry_run = DryRun(snapshot, policy_from_settings(), now.timestamp())
        newest = max((w.created_at for w in snapshot.workloads), default=float("-inf"))
        state = _State(key, uuid.uuid4().hex, time.time(), now, dry_run, newest)
        _share(state, _ttl())
        return state
    finally:
        if claimed:
            _cache_call("delete", building)


def _warm(state: _State) -> _State:
    """The replays' state copies, made before the state answers checks (after sharing: not pickled),
    also for a state loaded from the cache; with the garbage collector paused, as ``_loaded``."""
    with collector_paused():
        state.dry_run.warm()
    return state


def refresh_every_s(cost_s: float) -> float:
    """The least age of a kept state before it is rebuilt behind the requests, given what it cost this
    process (CPU seconds: getting it, and the answers computed on it): ``DRY_RUN_REFRESH_EVERY_S``,
    longer when the cost would otherwise take more than ``DRY_RUN_CPU_SHARE`` of a process's CPU (0: no
    such bound), and never past half of ``DRY_RUN_STALE_S`` (an older state would be rebuilt in a
    request)."""
    every_s = settings.DRY_RUN_REFRESH_EVERY_S
    if settings.DRY_RUN_CPU_SHARE > 0:
        every_s = max(every_s, min(cost_s / settings.DRY_RUN_CPU_SHARE, settings.DRY_RUN_STALE_S / 2))
    return every_s


def _handed_over(latest: object, key: tuple[object, ...]) -> _State | None:
    """The state the scheduler handed over last (step 5; ``latest``: its key) for the backend of
    ``key``, while it is younger than ``DRY_RUN_STALE_S``."""
    if not isinstance(latest, tuple) or latest[1:] != key[1:]:
        return None
    built_at = _cache_call("get", _stamp_key(latest))
    if not isinstance(built_at, float) or time.time() - built_at >= settings.DRY_RUN_STALE_S:
        return None
    state = _loaded(_shared_key(latest))
    if not isinstance(state, _State) or time.time() - state.built_at >= settings.DRY_RUN_STALE_S:
        return None
    return state


def _obtain(key: tuple[object, ...], backend: ClusterBackend | None, kept: _Kept | None = None) -> _Kept | None:
    """The state of ``key`` (shared by another process, else the one the scheduler handed over last,
    else built here), warmed, with its CPU cost here. None when ``kept`` is the scheduler's last one:
    it answers on (it is younger than ``DRY_RUN_STALE_S``) until the scheduler hands over the next."""
    started = time.thread_time()
    state = _shared_state(key)
    if state is None:
        _cache_call("set", WANTED, 1, timeout=int(settings.DRY_RUN_STALE_S) + 1)  # asks for a newer one
        latest = _cache_call("get", LATEST)
        if kept is not None and latest == kept.state.key:
            return None
        state = _handed_over(latest, key) or _build(key, backend)
    return _Kept(_warm(state), time.thread_time() - started)


def _kept_state(backend: ClusterBackend | None) -> _Kept:
    key = _last_cycle_key()
    with _kept_lock:
        kept = _kept.get("state")
        if kept is not None and _fresh(kept.state, key):
            return kept
        age_s = time.time() - kept.state.built_at if kept is not None else 0.0
        if kept is not None and settings.DRY_RUN_REFRESH_BEHIND and age_s < settings.DRY_RUN_STALE_S:
            # At most one rebuild every refresh_every_s: with a cycle every few seconds, each one would
            # otherwise have a web process run a whole cycle again for the dry runs (~1 core at 2,000
            # pending jobs: the snapshot's reads and the cycle with its forecast, ~2 s of CPU each).
            # A look that found nothing newer (the scheduler hands one over at most every
            # DRY_RUN_REFRESH_EVERY_S) is not repeated by every request: at most every RETRY_S.
            looked_s = time.time() - kept.looked_at
            if key not in _building and age_s >= refresh_every_s(kept.cost_s) and looked_s >= RETRY_S:
                _building.add(key)
                threading.Thread(target=_build_behind, args=(key,), name="dry-run-state", daemon=True).start()
            return kept
        obtained = _obtain(key, backend)
        assert obtained is not None  # without a kept state one is always built
        _kept["state"] = obtained
        return obtained


def _build_behind(key: tuple[object, ...]) -> None:
    """The state of ``key`` in a thread of its own (its own database connection, closed after), then kept."""
    try:
        with _kept_lock:
            kept = _kept.get("state")
        obtained = _obtain(key, None, kept)
        with _kept_lock:
            if obtained is not None:
                _kept["state"] = obtained
            elif kept is not None:
                kept.looked_at = time.time()
    except Exception:  # the requests go on with the kept state; the next one tries again
        logger.exception("building the dry run's state failed")
    finally:
        with _kept_lock:
            _building.discard(key)
        db_connection.close()


def dry_run_state(*, backend: ClusterBackend | None = None) -> tuple[DryRun, datetime]:
    """The last cycle's state for dry runs, and when it was read (see the module docstring)."""
    kept = _kept_state(backend)
    return kept.state.dry_run, kept.state.as_of


def dry_run_forget() -> None:
    """Drop the kept state, here and shared (tests that change nodes without touching a job)."""
    with _kept_lock:
        kept = _kept.pop("state", None)
    if kept is not None:
        _cache_call("delete", _shared_key(kept.state.key))
        _cache_call("delete", _stamp_key(kept.state.key))
    for name in (WANTED, PUBLISHED, LATEST):
        _cache_call("delete", name)


def dry_run_to_publish() -> bool:
    """Whether the scheduler's next cycle should hand its final state to the web processes (step 5 of
    the module docstring): ``DRY_RUN_PUBLISH``, a shared cache, a process asked for a newer state or
    none handed over within ``DRY_RUN_STALE_S`` (a web process that starts then takes that one rather
    than running a cycle itself in its first check), and none handed over within
    ``DRY_RUN_REFRESH_EVERY_S``."""
    if not settings.DRY_RUN_PUBLISH or (_cache_call("get", WANTED) is None and _cache_call("get", LATEST) is not None):
        return False
    return _cache_call("add", PUBLISHED, 1, timeout=max(1, round(settings.DRY_RUN_REFRESH_EVERY_S))) is True


def dry_run_publish(*, dry_run: DryRun, cycle_id: int, as_of: datetime) -> None:
    """Hand the cycle ``cycle_id``'s final state (``dry_run``: the cycle the scheduler ran, its plan
    applied) to the web processes, under the key they look it up by."""
    key = (cycle_id, settings.CLUSTER_BACKEND)
    newest = max((w.created_at for w in dry_run.snapshot.workloads), default=float("-inf"))
    state = _State(key, uuid.uuid4().hex, time.time(), as_of, dry_run, newest)
    _share(state, int(settings.DRY_RUN_STALE_S) + 1)
    _cache_call("set", LATEST, key, timeout=int(settings.DRY_RUN_STALE_S) + 1)


LATER_MARGIN = timedelta(seconds=30)  # a job saved this long before the snapshot may commit after it
LATER_MAX = 500  # later jobs read per check, oldest first
# Live jobs submitted since: pending ones, and those a cycle after the state's admitted meanwhile (the
# state, answering until a newer one is obtained, does not hold them either).
LATER_STATES = (JobState.PENDING, JobState.ADMITTED, JobState.RUNNING)


def _later(kept: _Kept) -> list[tuple[Workload, tuple[float, float] | None]]:
    """The live jobs submitted since the kept state's snapshot was read (step 3 of the module
    docstring), oldest first, as pending ones, with their expected runtimes; call under ``kept.lock``."""
    state = kept.state
    if kept.known is None:
        kept.known = frozenset(w.id for w in state.dry_run.snapshot.workloads)
    rows = (
        Job.objects.filter(state__in=LATER_STATES, created_at__gte=state.as_of - LATER_MARGIN)
        .exclude(not_before__gt=timezone.now())  # in a back-off: no cycle decides it yet (nor did the state's)
        .order_by("created_at", "id")
        .values_list("id")[:LATER_MAX]
    )
    ids = [str(pk) for (pk,) in rows if str(pk) not in kept.known]
    new = [int(pk) for pk in ids if pk not in kept.later]
    if new:
        jobs = (
            Job.objects.filter(pk__in=new)
            .select_related("local_queue__team", "team", "priority_class", "gpu_model")
            .prefetch_related("allowed_gpu_models")
        )
        # As submitted: one admitted since (by a cycle after the state's) took its room as the next
        # cycle would have given it, and keeps its place in the list (the copy goes on).
        loaded = [
            replace(workload_from_job(job, []), state=WorkloadState.PENDING, gpu_model=None, started_at=None)
            for job in jobs
        ]
        runtimes = {i: (a, b) for i, a, b in expected_runtimes(loaded, speedup=runtime_speedup())[0]}
        for w in loaded:
            kept.later[w.id] = (w, runtimes.get(w.id))
    return [kept.later[pk] for pk in ids if pk in kept.later]


def job_check(*, workload: Workload, backend: ClusterBackend | None = None) -> JobCheck:
    """What the next cycle decides for ``workload`` (not submitted), when it would start, and the
    smallest changes that start it sooner (``scheduling.engine.dryrun``), the jobs submitted since the
    state was read decided first; remembered per request shape and later jobs on the kept state (steps
    3-4 of the module docstring)."""
    kept = _kept_state(backend)
    state = kept.state
    runtimes = {i: (a, b) for i, a, b in expected_runtimes([workload], speedup=runtime_speedup())[0]}
    runtime = runtimes.get(workload.id)
    with kept.lock:  # the dry run sets the job's runtimes on the shared cycle while it answers
        later = _later(kept)
        shape = None
        if workload.created_at > state.newest_created_at:
            later_ids = tuple(w.id for w, _ in later)
            text = repr((replace(workload, created_at=0.0), runtime, later_ids))  # frozen dataclasses: stable
            shape = hashlib.sha256(text.encode()).hexdigest()
        shared = f"{SHARED}:answer:{state.state_id}:{shape}"
        if shape is not None:
            known = kept.answers.get(shape) or _cache_call("get", shared)
            if isinstance(known, JobCheck):
                kept.answers.setdefault(shape, known)
                return known
        started = time.thread_time()
        answer = _job_check(state, workload, runtime, later)
        kept.cost_s += time.thread_time() - started  # under kept.lock
        if shape is not None:
            if len(kept.answers) < ANSWERS_KEPT:
                kept.answers[shape] = answer
            _cache_call("set", shared, answer, timeout=_ttl())
        return answer


def _job_check(
    state: _State,
    workload: Workload,
    runtime: tuple[float, float] | None,
    later: list[tuple[Workload, tuple[float, float] | None]],
) -> JobCheck:
    dry_run = state.dry_run
    check = dry_run.check(workload, runtime, later)
    lq = dry_run.cycle.lq_by_name.get(workload.local_queue)
    models = dry_run.cycle.quota.flavors.get(lq.cluster_queue, ()) if lq is not None else ()
    suggestions = dry_run.suggestions(workload, check, models, later) if check.verdict != "never" else ()
    nodes = {n.name: n for n in dry_run.snapshot.nodes}
    types = {node_capacity_type(nodes[p.node]) for p in check.placements if p.node in nodes}
    return JobCheck(check, suggestions, state.as_of, types.pop() if len(types) == 1 else "on-demand")
