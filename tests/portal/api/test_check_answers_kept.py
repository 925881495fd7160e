"""The dry run's answers are remembered per request shape on the kept cycle state
(``scheduling.dry_run.job_check``): a repeated request is not run through the engine again, and
its answer is the one a dry run computed afresh on the same state gives."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.cache import cache

from billing.services import price_book_seed_defaults
from scheduling import dry_run as kept
from scheduling.adapters.simulated import SimulatedCluster
from scheduling.engine.dryrun import DryRun
from scheduling.engine.model import WorkloadState
from scheduling.services import cycle_run
from tests.portal.api.test_check import BODY, SPEEDUP

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def full_cluster(settings, world):
    """Both A100 nodes held by vision's 8-GPU jobs: a request waits, with a forecast start."""
    settings.SIM_SPEEDUP = SPEEDUP
    settings.CLUSTER_BACKEND = "simulated"
    price_book_seed_defaults()
    for _ in range(2):
        world.submit("vision", gpu=8, allowed_gpu_models=(world.models["A100-80GB"],), runtime_s=3600)
    cycle_run(backend=SimulatedCluster(speedup=SPEEDUP))
    kept.dry_run_forget()
    yield
    kept.dry_run_forget()


@pytest.fixture
def engine_checks(monkeypatch) -> list[str]:
    """The ids of the workloads the engine's dry run was asked about."""
    asked: list[str] = []
    check = DryRun.check

    def counting(self, workload, runtimes=None, later=()):
        asked.append(workload.id)
        return check(self, workload, runtimes, later)

    monkeypatch.setattr(DryRun, "check", counting)
    return asked


def test_the_same_request_twice_runs_the_engine_once_and_gets_the_fresh_answer(api, engine_checks):
    first = api("alice").post("/api/v1/jobs/check/", BODY, format="json").json()
    second = api("alice").post("/api/v1/jobs/check/", BODY, format="json").json()
    assert first["verdict"] == "waits"
    assert first["estimated_start_p50"] is not None
    assert len(engine_checks) == 1
    assert second == first
    # Computed afresh by the engine on the same state: the same answer.
    kept._kept["state"].answers.clear()
    cache.clear()  # and the answers shared with other processes
    fresh = api("alice").post("/api/v1/jobs/check/", BODY, format="json").json()
    assert len(engine_checks) == 2
    assert fresh == second


def test_another_request_shape_is_answered_by_the_engine(api, engine_checks):
    one = api("alice").post("/api/v1/jobs/check/", BODY, format="json").json()
    four = api("alice").post("/api/v1/jobs/check/", {**BODY, "gpu": 4}, format="json").json()
    other_queue = api("bob").post("/api/v1/jobs/check/", BODY, format="json").json()
    assert len(engine_checks) == 3
    # 4 GPUs, not 2, for as long (each figure rounded to 6 places)
    assert Decimal(four["cost"]["gpu_hours"]) == pytest.approx(
        2 * Decimal(one["cost"]["gpu_hours"]), abs=Decimal("0.000002")
    )
    assert other_queue["position"] == 1


def test_a_request_not_newer_than_every_job_of_the_state_is_not_remembered(engine_checks):
    state, _ = kept.dry_run_state()
    queued = next(w for w in state.snapshot.workloads)
    # Submitted no later than a job of the state: its place among them depends on its time.
    request = replace(queued, id="dry-run", state=WorkloadState.PENDING, gpu_model=None, placements=(), started_at=None)
    kept.job_check(workload=request)
    kept.job_check(workload=request)
    assert len(engine_checks) == 2


def test_an_answer_the_engine_computes_adds_its_cpu_to_the_kept_states_cost_and_a_remembered_one_does_not(
    api, engine_checks
):
    # What bounds how often the state is refreshed (DRY_RUN_CPU_SHARE): the state and its answers.
    kept.dry_run_state()
    got = kept._kept["state"].cost_s
    assert got > 0  # built here
    api("alice").post("/api/v1/jobs/check/", BODY, format="json")
    computed = kept._kept["state"].cost_s
    assert computed > got
    api("alice").post("/api/v1/jobs/check/", BODY, format="json")
    assert len(engine_checks) == 1
    assert kept._kept["state"].cost_s == computed


def test_a_new_cycle_drops_the_remembered_answers(api, engine_checks):
    api("alice").post("/api/v1/jobs/check/", BODY, format="json")
    cycle_run(backend=SimulatedCluster(speedup=SPEEDUP))
    api("alice").post("/api/v1/jobs/check/", BODY, format="json")
    assert len(engine_checks) == 2


def test_another_process_answers_from_the_shared_state_as_the_one_that_built_it(api, engine_checks, redis_cache):
    first = api("alice").post("/api/v1/jobs/check/", BODY, format="json").json()
    built = kept._kept["state"].state
    built_answers = dict(kept._kept["state"].answers)
    # Another web process: nothing kept in it, the cache shared. It loads the state (no cycle run)
    # and the answer; with the answer gone from the cache it asks the engine on the loaded state.
    kept._kept.clear()
    assert api("alice").post("/api/v1/jobs/check/", BODY, format="json").json() == first
    assert kept._kept["state"].state.state_id == built.state_id
    assert kept._kept["state"].state.dry_run is not built.dry_run  # unpickled, not the same object
    assert len(engine_checks) == 1
    loaded = kept._kept.pop("state").state
    cache.delete(
        f"{kept.SHARED}:answer:{loaded.state_id}:{next(iter(built_answers))}"
    )  # the state shared, its answer gone
    assert api("alice").post("/api/v1/jobs/check/", BODY, format="json").json() == first
    assert len(engine_checks) == 2


def test_a_process_waits_for_the_one_building_the_state_and_builds_it_itself_if_that_one_gives_up(redis_cache):
    built, _ = kept.dry_run_state()
    state = kept._kept.pop("state").state
    shared, building = kept._shared_key(state.key), f"{kept._shared_key(state.key)}:building"

    def later(action) -> threading.Thread:
        def run() -> None:
            time.sleep(0.3)
            action()

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    # Another process is building: this one waits and loads what it stores (no cycle run here).
    cache.delete(shared)
    cache.add(building, 1)
    thread = later(lambda: cache.set(shared, state))
    loaded, _ = kept.dry_run_state()
    thread.join()
    assert kept._kept["state"].state.state_id == state.state_id
    assert loaded is not built  # unpickled
    # Another process gave up (its claim gone, nothing stored): this one builds the state itself.
    kept._kept.clear()
    cache.delete(shared)
    cache.add(building, 1)
    thread = later(lambda: cache.delete(building))
    started = time.monotonic()
    kept.dry_run_state()
    thread.join()
    assert time.monotonic() - started >= 0.3
    assert kept._kept["state"].state.state_id != state.state_id
    assert cache.get(building) is None  # its own claim released


# Step 4: the scheduler hands its own cycle's state to the web processes.


@pytest.fixture
def builds(monkeypatch) -> list[tuple[object, ...]]:
    """The keys of the states a web process built itself (read a snapshot and ran the cycle)."""
    built: list[tuple[object, ...]] = []
    build = kept._build

    def counting(key, backend):
        built.append(key)
        return build(key, backend)

    monkeypatch.setattr(kept, "_build", counting)
    return built


def a_cycle(**kwargs):
    return cycle_run(backend=SimulatedCluster(speedup=SPEEDUP), **kwargs)


def test_asked_for_a_newer_state_the_next_cycle_hands_its_own_over_and_a_process_loads_it(api, redis_cache, builds):
    first = api("alice").post("/api/v1/jobs/check/", BODY, format="json").json()
    assert len(builds) == 1  # nothing handed over yet: built here, and the scheduler asked for one
    run = a_cycle()
    assert cache.get(kept.LATEST) == (run.id, "simulated")
    kept._kept.clear()  # another web process
    again = api("alice").post("/api/v1/jobs/check/", BODY, format="json").json()
    assert len(builds) == 1  # loaded, not built
    assert kept._kept["state"].state.key == (run.id, "simulated")
    assert again["verdict"] == first["verdict"] == "waits"


def test_a_web_process_that_starts_after_the_scheduler_ran_takes_its_state_without_running_a_cycle(
    api, redis_cache, builds
):
    run = a_cycle()  # no web process asked for a state yet
    answer = api("alice").post("/api/v1/jobs/check/", BODY, format="json")
    assert answer.status_code == 200
    assert builds == []
    assert kept._kept["state"].state.key == (run.id, "simulated")


def test_the_handed_over_state_answers_as_a_state_built_from_the_applied_plan(world, redis_cache, settings):
    """The scheduler's final state (before applying its plan) and a state read after applying it, at
    the same time, give the same answers to the same requests."""
    from django.utils import timezone

    from portal.jobs.services import workload_from_spec
    from scheduling.selectors import policy_from_settings, snapshot_for_cycle

    # Admitted by the cycle, no preemption: with victims still stopping, the states differ by their
    # devices (gone from the handed-over state, still held in the snapshot read before they stop).
    t4 = (world.models["T4"],)
    world.submit("nlp", gpu=1, allowed_gpu_models=t4, runtime_s=1800)
    world.submit("vision", gpu=0, gpu_milli=500, allowed_gpu_models=t4, runtime_s=600)
    backend = SimulatedCluster(speedup=SPEEDUP)
    cache.set(kept.WANTED, 1)
    now = timezone.now()
    run = cycle_run(backend=backend, now=now)
    assert run is not None
    assert run.admitted == 2  # the state after the plan differs from the snapshot before it
    assert run.preempted == 0
    handed = cache.get(kept._shared_key((run.id, "simulated"))).dry_run
    fresh = DryRun(snapshot_for_cycle(backend=backend, now=now), policy_from_settings(), now.timestamp())
    later = now + timedelta(seconds=1)  # submitted after every job of both states
    for team, overrides in [
        ("vision", {"gpu": 1}),
        ("vision", {"gpu": 8, "allowed_gpu_models": (world.models["A100-80GB"],)}),
        ("nlp", {"gpu": 2}),
        ("nlp", {"gpu": 64}),  # never fits
        ("vision", {"gpu": 0, "gpu_milli": 500, "allowed_gpu_models": (world.models["T4"],)}),
    ]:
        workload = workload_from_spec(world.spec(team, **overrides), now=later)
        assert handed.check(workload) == fresh.check(workload), (team, overrides)


def test_unasked_the_scheduler_hands_over_one_state_while_none_is_recent_and_asked_at_most_once_per_interval(
    redis_cache, settings
):
    settings.DRY_RUN_REFRESH_EVERY_S = 1.0
    none_yet = a_cycle()
    assert cache.get(kept.LATEST) == (none_yet.id, "simulated")  # a web process starting now takes it
    time.sleep(1.2)
    unasked = a_cycle()
    assert cache.get(kept.LATEST) == (none_yet.id, "simulated")  # one is recent: the cycle ran as ever
    assert cache.get(kept._shared_key((unasked.id, "simulated"))) is None
    cache.delete(kept.LATEST)  # none younger than DRY_RUN_STALE_S
    gone = a_cycle()
    assert cache.get(kept.LATEST) == (gone.id, "simulated")
    cache.delete(kept.PUBLISHED)
    cache.set(kept.WANTED, 1)
    first = a_cycle()
    second = a_cycle()  # within the interval: not handed over
    assert cache.get(kept.LATEST) == (first.id, "simulated")
    assert cache.get(kept._shared_key((second.id, "simulated"))) is None
    time.sleep(1.2)
    third = a_cycle()
    assert cache.get(kept.LATEST) == (third.id, "simulated")


@pytest.mark.django_db(transaction=True)
def test_behind_the_requests_the_schedulers_state_answers_until_it_hands_over_the_next(redis_cache, settings, builds):
    settings.DRY_RUN_REFRESH_BEHIND = True
    settings.DRY_RUN_REFRESH_EVERY_S = 0.0
    settings.DRY_RUN_CPU_SHARE = 0.0
    cache.set(kept.WANTED, 1)
    handed = a_cycle()
    state, _ = kept.dry_run_state()  # loaded: the scheduler's
    assert kept._kept["state"].state.key == (handed.id, "simulated")
    settings.DRY_RUN_PUBLISH = False
    a_cycle()  # a newer cycle, not handed over: the kept state answers on, and none is built here
    for _ in range(20):
        assert kept.dry_run_state()[0] is state
        time.sleep(0.05)
    settings.DRY_RUN_PUBLISH = True
    cache.delete(kept.PUBLISHED)
    newer = a_cycle()  # a check asked for a newer one meanwhile
    deadline = time.monotonic() + 30
    while kept._kept["state"].state.key != (newer.id, "simulated"):
        assert time.monotonic() < deadline, "the handed-over state was not loaded"
        kept.dry_run_state()
        time.sleep(0.05)
    assert builds == []
    while kept._building:  # no thread left holding a database connection after the test
        assert time.monotonic() < deadline + 30
        time.sleep(0.05)


def test_a_state_handed_over_for_another_backend_is_not_used(redis_cache, builds, settings):
    cache.set(kept.WANTED, 1)
    run = a_cycle()
    assert cache.get(kept.LATEST) == (run.id, "simulated")
    settings.CLUSTER_BACKEND = "kubernetes"  # the web processes now look for the other backend's state
    assert kept._handed_over(cache.get(kept.LATEST), (run.id, "kubernetes")) is None
    assert kept._handed_over(cache.get(kept.LATEST), (run.id, "simulated")) is not None
