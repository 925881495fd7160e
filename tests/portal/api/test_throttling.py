"""The throttles' sliding log (``portal.api.throttling``): exact under concurrent requests."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from django.core.cache import cache, caches
from django.core.cache.backends.redis import RedisCache

from portal.api.throttling import log_add, log_wait


@pytest.fixture(autouse=True, params=["redis", "locmem"])
def empty_log(request, settings):
    """Both homes of the log: Redis (the web processes' shared cache) and a local cache."""
    if request.param == "redis":
        if not settings.REDIS_URL:
            pytest.skip("needs REDIS_URL")
        settings.CACHES = {
            "default": {
                "BACKEND": "portal.cache.RedisCache",
                "LOCATION": settings.REDIS_URL,
                "KEY_PREFIX": f"throttle-test-{uuid.uuid4().hex}",
            }
        }
    cache.delete("throttle_test")
    yield
    cache.delete("throttle_test")


def test_concurrent_requests_are_each_counted_once_and_the_limit_holds():
    outcomes: list[float | None] = []
    lock = threading.Lock()
    start = threading.Barrier(24)

    def request() -> None:
        start.wait()
        wait_s = log_add("throttle_test", window_s=60, now=time.time(), limit=10)
        with lock:
            outcomes.append(wait_s)

    threads = [threading.Thread(target=request) for _ in range(24)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes.count(None) <= 10  # never more than the limit, whatever the interleaving
    assert all(0 < w <= 60 for w in outcomes if w is not None)
    # Once the burst is over, the log holds exactly the requests let through.
    waits = [log_add("throttle_test", window_s=60, now=time.time(), limit=10) for _ in range(10)]
    assert waits.count(None) == 10 - outcomes.count(None)


def test_entries_leave_the_window_and_the_wait_counts_from_the_oldest():
    now = 1_000_000.0
    for offset in (0.0, 10.0, 20.0):
        assert log_add("throttle_test", window_s=60, now=now + offset, limit=3) is None
    assert log_add("throttle_test", window_s=60, now=now + 30, limit=3) == pytest.approx(30.0)
    assert log_wait("throttle_test", window_s=60, now=now + 30, limit=3) == pytest.approx(30.0)
    # 60 s after the first, it has left the window: one more fits.
    assert log_wait("throttle_test", window_s=60, now=now + 60, limit=3) is None
    assert log_add("throttle_test", window_s=60, now=now + 60, limit=3) is None


def test_a_list_an_older_version_left_under_the_key_is_not_read_as_the_log():
    if not isinstance(caches["default"], RedisCache):
        pytest.skip("the list is the log itself in a local cache")
    now = time.time()
    cache.set("throttle_test", [now, now, now], 60)  # DRF's list, as the portal kept it before
    assert log_add("throttle_test", window_s=60, now=now, limit=2) is None


def test_several_keys_are_each_judged_on_their_own_log_in_one_step():
    from portal.api.throttling import LogEntry, log_steps

    now = 1_000_000.0
    user = LogEntry("throttle_test", window_s=60, limit=2)
    address = LogEntry("throttle_test_ip", window_s=30, limit=3)
    cache.delete("throttle_test_ip")
    assert log_steps([user, address], now=now) == [None, None]
    assert log_steps([user, address], now=now + 1) == [None, None]
    # The user's log is full (2 of 2): refused there, still logged for the address (3 of 3).
    assert log_steps([user, address], now=now + 2) == [pytest.approx(58.0), None]
    # Both full: each answers its own wait, from its own oldest entry and window.
    assert log_steps([user, address], now=now + 3) == [pytest.approx(57.0), pytest.approx(27.0)]
    assert log_steps([], now=now) == []
    cache.delete("throttle_test_ip")


def test_a_refused_stop_entry_ends_the_step_and_the_entries_after_it_are_not_logged():
    from portal.api.throttling import LogEntry, log_steps

    now = 1_000_000.0
    cache.delete("throttle_test_ip")
    assert log_add("throttle_test", window_s=60, now=now, limit=1) is None  # the gate's log: full
    gate = LogEntry("throttle_test", window_s=60, limit=1, add=False, stop=True)
    after = LogEntry("throttle_test_ip", window_s=60, limit=1)
    assert log_steps([gate, after], now=now + 10) == [pytest.approx(50.0), None]
    # Not logged: once the gate's entry has left its window, ``after`` still has room for one.
    assert log_steps([gate, after], now=now + 61) == [None, None]
    assert log_steps([after], now=now + 62) == [pytest.approx(59.0)]
    cache.delete("throttle_test_ip")
