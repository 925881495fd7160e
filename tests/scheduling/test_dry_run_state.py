"""The dry run's kept state (scheduling.dry_run.dry_run_state): one cycle's state answers checks until
a scheduling cycle has run since or it is DRY_RUN_TTL_S old; then it is rebuilt, in the request or
(DRY_RUN_REFRESH_BEHIND) behind the requests, which are answered from the kept state meanwhile."""

from __future__ import annotations

import time

import pytest
from django.utils import timezone

from scheduling.dry_run import dry_run_forget, dry_run_state, refresh_every_s
from scheduling.models import CycleRun


@pytest.fixture(autouse=True)
def simulated(settings):
    settings.CLUSTER_BACKEND = "simulated"
    dry_run_forget()
    yield
    dry_run_forget()


def a_cycle_runs() -> None:
    CycleRun.objects.create(started_at=timezone.now(), duration_ms=1.0)


def rebuilt_behind(first) -> None:
    """Wait (up to a minute) until the checks get a state other than ``first``."""
    deadline = time.monotonic() + 60
    while dry_run_state()[0] is first:
        assert time.monotonic() < deadline, "the state was not rebuilt behind the requests"
        time.sleep(0.05)


@pytest.mark.django_db
def test_the_kept_state_answers_until_a_cycle_runs_then_the_next_check_rebuilds_it(world):
    first, as_of = dry_run_state()
    assert dry_run_state() == (first, as_of)  # kept: no second cycle
    a_cycle_runs()
    second, later = dry_run_state()
    assert second is not first
    assert later >= as_of
    assert dry_run_state()[0] is second


@pytest.mark.django_db
def test_the_kept_state_is_rebuilt_once_it_is_older_than_its_ttl(world, settings):
    first, _ = dry_run_state()
    settings.DRY_RUN_TTL_S = 0.0
    assert dry_run_state()[0] is not first


@pytest.mark.django_db(transaction=True)
def test_behind_the_requests_a_check_gets_the_kept_state_while_the_new_cycles_is_built(world, settings):
    settings.DRY_RUN_REFRESH_BEHIND = True
    settings.DRY_RUN_REFRESH_EVERY_S = 0.0
    settings.DRY_RUN_CPU_SHARE = 0.0
    first, as_of = dry_run_state()
    a_cycle_runs()
    assert dry_run_state() == (first, as_of)  # answered at once from the kept state, as of its time
    rebuilt_behind(first)
    fresh, fresh_as_of = dry_run_state()
    assert fresh_as_of > as_of
    assert dry_run_state()[0] is fresh  # current now: no further rebuild


@pytest.mark.django_db
def test_a_state_older_than_the_staleness_bound_is_rebuilt_in_the_request(world, settings):
    settings.DRY_RUN_REFRESH_BEHIND = True
    settings.DRY_RUN_STALE_S = 0.0
    first, _ = dry_run_state()
    a_cycle_runs()
    assert dry_run_state()[0] is not first


@pytest.mark.django_db(transaction=True)
def test_behind_the_requests_a_state_younger_than_the_refresh_interval_is_not_rebuilt(world, settings):
    # Cycles every few seconds would otherwise keep a web process rebuilding (a whole cycle's CPU each).
    settings.DRY_RUN_REFRESH_BEHIND = True
    settings.DRY_RUN_REFRESH_EVERY_S = 3600.0
    first, as_of = dry_run_state()
    a_cycle_runs()
    for _ in range(20):
        assert dry_run_state() == (first, as_of)  # kept, and no rebuild started behind the requests
        time.sleep(0.05)
    settings.DRY_RUN_REFRESH_EVERY_S = 0.0  # old enough now: the next check starts the rebuild
    settings.DRY_RUN_CPU_SHARE = 0.0
    rebuilt_behind(first)


@pytest.mark.django_db(transaction=True)
def test_behind_the_requests_a_state_is_not_rebuilt_more_often_than_its_cpu_share_allows(world, settings):
    # Getting the state cost some CPU here; at a share of 10^-9 of the CPU that would be centuries,
    # capped at half the staleness bound (30 s): not within the next second.
    settings.DRY_RUN_REFRESH_BEHIND = True
    settings.DRY_RUN_REFRESH_EVERY_S = 0.0
    settings.DRY_RUN_CPU_SHARE = 1e-9
    first, as_of = dry_run_state()
    a_cycle_runs()
    for _ in range(20):
        assert dry_run_state() == (first, as_of)
        time.sleep(0.05)
    settings.DRY_RUN_CPU_SHARE = 0.0  # no bound: the next check starts the rebuild
    rebuilt_behind(first)


@pytest.mark.parametrize(
    ("cost_s", "every_s", "share", "expected_s"),
    [
        (2.0, 5.0, 0.1, 20.0),  # 2 s of CPU every 20 s is 10 %
        (0.1, 5.0, 0.1, 5.0),  # cheap: the fixed interval
        (10.0, 5.0, 0.1, 30.0),  # 100 s would pass the staleness bound: half of it
        (2.0, 5.0, 0.0, 5.0),  # no share bound
        (1.0, 0.0, 0.25, 4.0),
    ],
)
def test_the_refresh_interval_keeps_the_states_cpu_within_its_share(settings, cost_s, every_s, share, expected_s):
    settings.DRY_RUN_REFRESH_EVERY_S = every_s
    settings.DRY_RUN_CPU_SHARE = share
    settings.DRY_RUN_STALE_S = 60.0
    assert refresh_every_s(cost_s) == pytest.approx(expected_s)


@pytest.mark.django_db
def test_a_shared_state_too_old_to_take_is_not_read_from_the_cache(world, settings, monkeypatch, redis_cache):
    # Its stamp (built_at) is read first: unpickling a megabyte only to refuse it cost the web's CPU.
    from scheduling import dry_run

    dry_run_state()
    key = dry_run._last_cycle_key()
    read: list[str] = []
    call = dry_run._cache_call
    monkeypatch.setattr(dry_run, "_cache_call", lambda method, *a, **k: read.append(a[0]) or call(method, *a, **k))
    settings.DRY_RUN_TTL_S = 3600.0
    assert dry_run._shared_state(key).built_at == dry_run._kept["state"].state.built_at  # taken: read
    assert dry_run._shared_key(key) in read
    read.clear()
    settings.DRY_RUN_TTL_S = 0.0
    assert dry_run._shared_state(key) is None
    assert read == [dry_run._stamp_key(key)]


@pytest.mark.django_db(transaction=True)
def test_behind_the_requests_a_look_that_found_nothing_newer_is_not_repeated_by_every_request(
    world, settings, monkeypatch, redis_cache
):
    from scheduling import dry_run

    settings.DRY_RUN_REFRESH_BEHIND = True
    settings.DRY_RUN_REFRESH_EVERY_S = 0.0
    settings.DRY_RUN_CPU_SHARE = 0.0
    a_cycle_runs()
    first, as_of = dry_run_state()
    # The scheduler handed this very state over: a look finds nothing newer.
    dry_run.dry_run_publish(dry_run=first, cycle_id=CycleRun.objects.order_by("-id")[0].pk, as_of=as_of)
    settings.DRY_RUN_TTL_S = 0.0  # the kept state is never current: every check would look
    looks: list[object] = []
    obtain = dry_run._obtain
    monkeypatch.setattr(dry_run, "_obtain", lambda *a: looks.append(a) or obtain(*a))
    monkeypatch.setattr(dry_run, "RETRY_S", 3600.0)
    dry_run_state()
    deadline = time.monotonic() + 60
    while dry_run._kept["state"].looked_at == 0.0:  # the first look, behind the request, found none
        assert time.monotonic() < deadline, "no look behind the requests"
        time.sleep(0.05)
    for _ in range(20):
        assert dry_run_state() == (first, as_of)
    assert len(looks) == 1
    monkeypatch.setattr(dry_run, "RETRY_S", 0.0)
    dry_run_state()
    while len(looks) < 2:
        assert time.monotonic() < deadline, "no second look once RETRY_S had passed"
        time.sleep(0.05)


@pytest.mark.django_db
def test_a_shared_state_is_unpickled_and_warmed_with_the_garbage_collector_paused(world, monkeypatch, redis_cache):
    # A state is some 100,000 objects: made with the collector running, they set off full collections
    # that traverse the whole web process, holding the GIL (three times the unpickling's own cost).
    import gc

    from scheduling import dry_run

    dry_run_state()
    key = dry_run._last_cycle_key()
    enabled: list[tuple[str, bool]] = []
    call = dry_run._cache_call

    def watched(method, *args, **kwargs):
        enabled.append((args[0], gc.isenabled()))
        return call(method, *args, **kwargs)

    monkeypatch.setattr(dry_run, "_cache_call", watched)
    warm = dry_run.DryRun.warm
    monkeypatch.setattr(dry_run.DryRun, "warm", lambda self: enabled.append(("warm", gc.isenabled())) or warm(self))
    assert gc.isenabled()
    state = dry_run._shared_state(key)
    assert state is not None
    dry_run._warm(state)
    assert (dry_run._stamp_key(key), True) in enabled  # a float: read with it running
    assert (dry_run._shared_key(key), False) in enabled
    assert ("warm", False) in enabled
    assert gc.isenabled()  # running again after
