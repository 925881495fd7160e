"""API throttles (DRF): per user, per client address, and failed token authentications per address.

Rates come from settings at request time (``API_THROTTLE_*``), so a test or a benchmark can change
them without reloading DRF. A throttled request is a 429 with ``Retry-After`` (DRF's ``Throttled``).
Each key's requests of the last window are a sliding log, as DRF keeps them, but in a Redis sorted
set when the default cache is Redis (``REDIS_URL``; shared by all web processes): one atomic round
trip per request instead of reading, filtering and writing back the whole list (one address's list
holds every request of the last minute), and two concurrent requests cannot lose each other's entry.
Other caches (tests without Redis) keep DRF's list.
"""

from __future__ import annotations

import threading
import time
import uuid

from django.conf import settings
from django.core.cache import cache, caches
from django.core.cache.backends.redis import RedisCache
from django.core.exceptions import ImproperlyConfigured
from rest_framework.exceptions import Throttled
from rest_framework.throttling import SimpleRateThrottle

_local_lock = threading.Lock()


def _redis():
    """The default cache's Redis client, or None when the cache is not Redis."""
    backend = caches["default"]  # ``cache`` is a proxy to it, never a RedisCache itself
    return backend._cache.get_client(write=True) if isinstance(backend, RedisCache) else None


def _log_key(key: str) -> str:
    """The sorted set's Redis key: its own name, so a list an older version left under ``key`` (for
    the minute it lives) is never read as a set."""
    return cache.make_key(f"{key}:log")


def log_add(key: str, *, window_s: float, now: float, limit: int | None = None) -> float | None:
    """Log a request for ``key`` unless ``limit`` requests are logged within the last ``window_s``.

    Returns None when logged, else the seconds until the oldest logged request leaves the window
    (DRF's wait for a full log)."""
    client = _redis()
    if client is None:
        with _local_lock:  # read, filter and write back as one step within this process
            history = [at for at in cache.get(key, []) if at > now - window_s]
            if limit is not None and len(history) >= limit:
                return window_s - (now - history[-1])
            cache.set(key, [now, *history], window_s)
            return None
    name = _log_key(key)
    member = f"{now!r}:{uuid.uuid4().hex[:12]}"
    pipe = client.pipeline(transaction=True)  # MULTI: the trim, the entry and the count at once
    pipe.zremrangebyscore(name, "-inf", now - window_s)
    pipe.zadd(name, {member: now})
    pipe.zcard(name)
    pipe.zrange(name, 0, 0, withscores=True)
    pipe.expire(name, int(window_s) + 1)
    _, _, count, oldest, _ = pipe.execute()
    if limit is not None and count > limit:
        client.zrem(name, member)  # refused requests are not counted, as in DRF
        return window_s - (now - float(oldest[0][1]))
    return None


def log_wait(key: str, *, window_s: float, now: float, limit: int) -> float | None:
    """The seconds until ``key`` may log a request again, or None when fewer than ``limit`` are logged."""
    client = _redis()
    if client is None:
        history = [at for at in cache.get(key, []) if at > now - window_s]
        return window_s - (now - history[-1]) if len(history) >= limit else None
    name = _log_key(key)
    pipe = client.pipeline(transaction=True)
    pipe.zremrangebyscore(name, "-inf", now - window_s)
    pipe.zcard(name)
    pipe.zrange(name, 0, 0, withscores=True)
    _, count, oldest = pipe.execute()
    return window_s - (now - float(oldest[0][1])) if count >= limit else None


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
