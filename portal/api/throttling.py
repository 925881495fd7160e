"""API throttles (DRF): per user, per client address, and failed token authentications per address.

Rates come from settings at request time (``API_THROTTLE_*``), so a test or a benchmark can change
them without reloading DRF. A throttled request is a 429 with ``Retry-After`` (DRF's ``Throttled``).
Each key's requests of the last window are a sliding log, as DRF keeps them, but in a Redis sorted
set when the default cache is Redis (``REDIS_URL``; shared by all web processes): one atomic script
(one round trip) per request instead of reading, filtering and writing back the whole list (one address's list
holds every request of the last minute), and two concurrent requests cannot lose each other's entry.
Other caches (tests without Redis) keep DRF's list.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any

from django.conf import settings
from django.core.cache import cache, caches
from django.core.cache.backends.redis import RedisCache
from django.core.exceptions import ImproperlyConfigured
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from rest_framework.exceptions import Throttled
from rest_framework.throttling import SimpleRateThrottle

logger = logging.getLogger(__name__)

_local_lock = threading.Lock()


# One atomic step per request (a Lua script runs alone on the server): drop the entries older than the
# window, refuse when ``limit`` remain (answering the oldest entry's score), else log the request.
# ARGV: the newest score already out of the window, the limit (-1: none), the member to add ('' to only
# test), its score, the key's lifetime in seconds.
_LOG_SCRIPT = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
local limit = tonumber(ARGV[2])
if limit >= 0 and redis.call('ZCARD', KEYS[1]) >= limit then
  return redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2]
end
if ARGV[3] ~= '' then
  redis.call('ZADD', KEYS[1], ARGV[4], ARGV[3])
  redis.call('EXPIRE', KEYS[1], ARGV[5])
end
return false
"""
# A Redis client and its registered script per connection pool (Django's cache builds a new client,
# and redis-py a new pipeline, per call: each copies ~170 response callbacks, a millisecond of CPU).
_clients: dict[int, tuple[Any, Any, Any]] = {}


def _redis():
    """The default cache's Redis client and the log script, or None when the cache is not Redis."""
    backend = caches["default"]  # ``cache`` is a proxy to it, never a RedisCache itself
    if not isinstance(backend, RedisCache):
        return None
    pool = backend._cache._get_connection_pool(True)
    kept = _clients.get(id(pool))
    if kept is None or kept[0] is not pool:
        client = backend._cache.get_client(write=True)
        kept = _clients[id(pool)] = (pool, client, client.register_script(_LOG_SCRIPT))
    return kept[1], kept[2]


def _log_key(key: str) -> str:
    """The sorted set's Redis key: its own name, so a list an older version left under ``key`` (for
    the minute it lives) is never read as a set."""
    return cache.make_key(f"{key}:log")


def _log_step(redis, key: str, *, window_s: float, now: float, limit: int | None, add: bool) -> float | None:
    client, script = redis
    member = f"{now!r}:{uuid.uuid4().hex[:12]}" if add else ""
    try:
        oldest = script(
            keys=[_log_key(key)],
            args=[repr(now - window_s), -1 if limit is None else limit, member, repr(now), int(window_s) + 1],
            client=client,
        )
    except (RedisConnectionError, RedisTimeoutError) as error:
        # Redis unreachable: the request goes through unthrottled rather than failing (a 500 for a
        # submit the database would have taken); the log resumes when Redis is back.
        logger.warning("throttle log %s not kept: Redis unreachable (%s)", key, error)
        return None
    # A request logged by another process after this one read its clock can be the oldest: its
    # entry leaves the window at most ``window_s`` from now.
    return None if oldest is None else min(window_s, window_s - (now - float(oldest)))


def log_add(key: str, *, window_s: float, now: float, limit: int | None = None) -> float | None:
    """Log a request for ``key`` unless ``limit`` requests are logged within the last ``window_s``.

    Returns None when logged, else the seconds until the oldest logged request leaves the window
    (DRF's wait for a full log). Refused requests are not logged, as in DRF."""
    redis = _redis()
    if redis is None:
        with _local_lock:  # read, filter and write back as one step within this process
            history = [at for at in cache.get(key, []) if at > now - window_s]
            if limit is not None and len(history) >= limit:
                return window_s - (now - history[-1])
            cache.set(key, [now, *history], window_s)
            return None
    return _log_step(redis, key, window_s=window_s, now=now, limit=limit, add=True)


def log_wait(key: str, *, window_s: float, now: float, limit: int) -> float | None:
    """The seconds until ``key`` may log a request again, or None when fewer than ``limit`` are logged."""
    redis = _redis()
    if redis is None:
        history = [at for at in cache.get(key, []) if at > now - window_s]
        return window_s - (now - history[-1]) if len(history) >= limit else None
    return _log_step(redis, key, window_s=window_s, now=now, limit=limit, add=False)


class _SettingsRateThrottle(SimpleRateThrottle):
    setting = ""
    num_requests: int  # set from the rate by SimpleRateThrottle.__init__ (and UserThrottle for anonymous)
    duration: int
    wait_s: float | None = None

    def get_rate(self) -> str:
        return str(getattr(settings, self.setting))

    def parse_rate(self, rate) -> tuple[int, int]:
        limit, window_s = super().parse_rate(rate)
        if limit is None or window_s is None:
            raise ImproperlyConfigured(f"{self.setting}={rate!r}: a rate like 100/min")
        return limit, window_s

    def allow_request(self, request, view) -> bool:
        if not settings.API_THROTTLE_ENABLED or self.rate is None:
            return True
        self.key = self.get_cache_key(request, view)
        if self.key is None:
            return True
        self.now = self.timer()
        self.wait_s = log_add(self.key, window_s=self.duration, now=self.now, limit=self.num_requests)
        return self.wait_s is None

    def wait(self) -> float | None:
        return self.wait_s


class UserThrottle(_SettingsRateThrottle):
    """Per authenticated user; anonymous requests are counted per address at the anonymous rate."""

    scope = "user"

    def get_rate(self) -> str:
        return settings.API_THROTTLE_USER

    def get_cache_key(self, request, view) -> str:
        if request.user and request.user.is_authenticated:
            return self.cache_format % {"scope": "user", "ident": request.user.pk}
        self.num_requests, self.duration = self.parse_rate(settings.API_THROTTLE_ANON)
        return self.cache_format % {"scope": "anon", "ident": self.get_ident(request)}


class IpThrottle(_SettingsRateThrottle):
    """Per client address, whoever is logged in (one address cycling through stolen tokens)."""

    scope = "ip"
    setting = "API_THROTTLE_IP"

    def get_cache_key(self, request, view) -> str:
        return self.cache_format % {"scope": "ip", "ident": self.get_ident(request)}


class AuthFailureThrottle(_SettingsRateThrottle):
    """Failed token authentications per address: ``check`` before trying a token, ``record`` on failure.

    Authentication runs before DRF's throttles, so without this a client guessing tokens only ever
    sees 401s."""

    scope = "authfail"
    setting = "API_THROTTLE_AUTH_FAILURES"

    def __init__(self, request) -> None:
        super().__init__()
        self.key: str = self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}
        self.limit, self.window_s = self.parse_rate(self.get_rate())

    def get_cache_key(self, request, view) -> str:
        return self.key

    def check(self) -> None:
        if not settings.API_THROTTLE_ENABLED:
            return
        wait_s = log_wait(self.key, window_s=self.window_s, now=time.time(), limit=self.limit)
        if wait_s is not None:
            raise Throttled(wait=max(1.0, wait_s), detail="too many failed logins")

    def record(self) -> None:
        if settings.API_THROTTLE_ENABLED:
            log_add(self.key, window_s=self.window_s, now=time.time())
