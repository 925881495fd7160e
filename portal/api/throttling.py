"""API throttles (DRF): per user, per client address, and failed token authentications per address.

Rates come from settings at request time (``API_THROTTLE_*``), so a test or a benchmark can change
them without reloading DRF. A throttled request is a 429 with ``Retry-After`` (DRF's ``Throttled``).
Each key's requests of the last window are a sliding log, as DRF keeps them, but in a Redis sorted
set when the default cache is Redis (``REDIS_URL``; shared by all web processes): one atomic script
(one round trip) per request for both the user's and the address's log (``ApiThrottle``) instead of
reading, filtering and writing back each whole list (one address's list holds every request of the
last minute), and two concurrent requests cannot lose each other's entry.
Other caches (tests without Redis) keep DRF's list.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.cache import cache, caches
from django.core.cache.backends.redis import RedisCache
from django.core.exceptions import ImproperlyConfigured
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from rest_framework.exceptions import Throttled
from rest_framework.permissions import IsAuthenticated
from rest_framework.throttling import BaseThrottle, SimpleRateThrottle

logger = logging.getLogger(__name__)

_local_lock = threading.Lock()


# One atomic step per request (a Lua script runs alone on the server), for each key in turn: drop
# the entries older than the window, refuse when ``limit`` remain (answering the oldest entry's
# score; a refusal of a key marked ``stop`` ends the step: the keys after it are neither judged nor
# logged), else log the request (answering ''). ARGV, six per key: the newest score already out of
# the window, the limit (-1: none), the member to add ('' to only test), its score, the key's
# lifetime in seconds, '1' to stop on a refusal. Several keys (the address's failed logins, the
# user's and the address's requests) cost one round trip.
_LOG_SCRIPT = """
local out = {}
for i, key in ipairs(KEYS) do
  local a = (i - 1) * 6
  redis.call('ZREMRANGEBYSCORE', key, '-inf', ARGV[a + 1])
  local limit = tonumber(ARGV[a + 2])
  if limit >= 0 and redis.call('ZCARD', key) >= limit then
    out[i] = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2]
    if ARGV[a + 6] == '1' then
      return out
    end
  else
    out[i] = ''
    if ARGV[a + 3] ~= '' then
      redis.call('ZADD', key, ARGV[a + 4], ARGV[a + 3])
      redis.call('EXPIRE', key, ARGV[a + 5])
    end
  end
end
return out
"""
# A Redis client and its registered script per connection pool (Django's cache builds a new client,
# and redis-py a new pipeline, per call: each copies ~170 response callbacks, a millisecond of CPU).
_clients: dict[int, tuple[Any, Any, Any]] = {}


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One key's step of a request: log it (``add``) unless ``limit`` requests are logged within the
    last ``window_s`` (``limit`` None: always log); ``stop``: if refused, neither judge nor log the
    entries after it."""

    key: str
    window_s: float
    limit: int | None = None
    add: bool = True
    stop: bool = False  # refused, the request is refused: the entries after it are not judged


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


def _log_steps(redis, entries: Sequence[LogEntry], *, now: float) -> list[float | None]:
    client, script = redis
    args: list[Any] = []
    for entry in entries:
        member = f"{now!r}:{uuid.uuid4().hex[:12]}" if entry.add else ""
        limit = -1 if entry.limit is None else entry.limit
        args += [
            repr(now - entry.window_s),
            limit,
            member,
            repr(now),
            int(entry.window_s) + 1,
            "1" if entry.stop else "",
        ]
    try:
        oldest = script(keys=[_log_key(entry.key) for entry in entries], args=args, client=client)
    except (RedisConnectionError, RedisTimeoutError) as error:
        # Redis unreachable: the request goes through unthrottled rather than failing (a 500 for a
        # submit the database would have taken); the log resumes when Redis is back.
        logger.warning("throttle log %s not kept: Redis unreachable (%s)", [e.key for e in entries], error)
        return [None] * len(entries)
    # A request logged by another process after this one read its clock can be the oldest: its
    # entry leaves the window at most ``window_s`` from now.
    oldest = [*oldest, *[b""] * (len(entries) - len(oldest))]  # after a stop: not judged
    return [
        None if not score else min(entry.window_s, entry.window_s - (now - float(score)))
        for entry, score in zip(entries, oldest, strict=True)
    ]


def _local_step(entry: LogEntry, *, now: float) -> float | None:
    """``_log_steps``' rule on a cache that is not Redis: DRF's list, newest first."""
    history = [at for at in cache.get(entry.key, []) if at > now - entry.window_s]
    if entry.limit is not None and len(history) >= entry.limit:
        return entry.window_s - (now - history[-1])
    if entry.add:
        cache.set(entry.key, [now, *history], entry.window_s)
    return None


def log_steps(entries: Sequence[LogEntry], *, now: float) -> list[float | None]:
    """Each entry's step, in order, as one atomic step on Redis (one round trip): per entry None when
    it passed (and was logged if ``add``) or was not judged (after a refused ``stop`` entry), else the
    seconds until the oldest logged request leaves its window (DRF's wait for a full log). Refused
    requests are not logged, as in DRF."""
    if not entries:
        return []
    redis = _redis()
    if redis is None:
        waits: list[float | None] = [None] * len(entries)
        with _local_lock:  # read, filter and write back as one step within this process
            for i, entry in enumerate(entries):
                waits[i] = _local_step(entry, now=now)
                if waits[i] is not None and entry.stop:
                    break
        return waits
    return _log_steps(redis, entries, now=now)


def log_add(key: str, *, window_s: float, now: float, limit: int | None = None) -> float | None:
    """Log a request for ``key`` unless ``limit`` requests are logged within the last ``window_s``.

    Returns None when logged, else the seconds until the oldest logged request leaves the window
    (DRF's wait for a full log). Refused requests are not logged, as in DRF."""
    return log_steps([LogEntry(key, window_s, limit)], now=now)[0]


def log_wait(key: str, *, window_s: float, now: float, limit: int) -> float | None:
    """The seconds until ``key`` may log a request again, or None when fewer than ``limit`` are logged."""
    return log_steps([LogEntry(key, window_s, limit, add=False)], now=now)[0]


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


class ApiThrottle(BaseThrottle):
    """The API's throttle: ``UserThrottle`` and ``IpThrottle`` as one throttle, both logs in one round
    trip to Redis. Each log is kept and judged on its own, as if DRF ran the two (a request refused
    by one is still logged by the other); refused by either, the request waits for the longer one.

    A request with an API token has had both logs taken already, in the same round trip as its
    address's failed logins (``AuthFailureThrottle.admit``), when nothing could come between its
    authentication and this throttle (``judged_with_authentication``): this uses that answer."""

    rules: tuple[type[_SettingsRateThrottle], ...] = (UserThrottle, IpThrottle)
    wait_s: float | None = None

    @classmethod
    def entries(cls, request, view, user=None) -> list[LogEntry]:
        """The request's log entries (``user``: who it authenticates as, before DRF has set it)."""
        entries = []
        for rule in cls.rules:
            throttle = rule()
            if throttle.rate is None:
                continue
            key: str | None
            if user is not None and isinstance(throttle, UserThrottle):
                key = throttle.cache_format % {"scope": "user", "ident": user.pk}
            else:
                key = throttle.get_cache_key(request, view)  # the user's rule may switch to the anonymous rate
            if key is not None:
                entries.append(LogEntry(key, throttle.duration, throttle.num_requests))
        return entries

    def allow_request(self, request, view) -> bool:
        if not settings.API_THROTTLE_ENABLED:
            return True
        waits = getattr(request, _JUDGED, None)
        if waits is None:
            waits = log_steps(self.entries(request, view), now=time.time())
        refused = [wait_s for wait_s in waits if wait_s is not None]
        self.wait_s = max(refused, default=None)
        return not refused

    def wait(self) -> float | None:
        return self.wait_s


def _drfs_own(view, name: str) -> bool:
    """Whether the view's method ``name`` is ``APIView``'s own (no class of the view overrides it; not
    compared with ``APIView`` itself: importing DRF's views here would import this module again)."""
    owner = next((kind for kind in type(view).__mro__ if name in vars(kind)), None)
    return owner is not None and owner.__module__ == "rest_framework.views" and owner.__name__ == "APIView"


_JUDGED = "_api_throttle_waits"  # on a DRF request: ApiThrottle's answer, taken at its authentication


def judged_with_authentication(view) -> bool:
    """Whether ``view``'s throttle may be judged as its token is authenticated: it runs DRF's
    ``initial`` (authentication, then the permission check, then the throttles), its only throttle
    is ``ApiThrottle`` and its permissions let any authenticated user through, so every request
    that authenticates reaches the throttle, as it would one step later."""
    if view is None or not all(_drfs_own(view, name) for name in ("initial", "check_permissions")):
        return False
    if [type(t) for t in view.get_throttles()] != [ApiThrottle]:
        return False
    return all(type(p) is IsAuthenticated for p in view.get_permissions())


class AuthFailureThrottle(_SettingsRateThrottle):
    """Failed token authentications per address: ``admit`` a token found, ``refuse`` one not found
    (or a malformed header). Past the limit, the address gets 429 whatever it sends.

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

    def _refused(self, wait_s: float) -> Throttled:
        return Throttled(wait=max(1.0, wait_s), detail="too many failed logins")

    def admit(self, request, user) -> None:
        """A request whose token is ``user``'s: 429 if its address is past the limit of failed logins;
        in the same round trip, ``ApiThrottle``'s logs when the view's throttle may be judged now
        (``judged_with_authentication``: its answer is kept on the request for the throttle)."""
        if not settings.API_THROTTLE_ENABLED:
            return
        view = (getattr(request, "parser_context", None) or {}).get("view")
        judged = judged_with_authentication(view)
        throttled = ApiThrottle.entries(request, view, user) if judged else []
        gate = LogEntry(self.key, self.window_s, self.limit, add=False, stop=True)
        waits = log_steps([gate, *throttled], now=time.time())
        if waits[0] is not None:
            raise self._refused(waits[0])
        if judged:
            setattr(request, _JUDGED, waits[1:])

    def refuse(self) -> None:
        """A failed login: 429 if the address is past the limit (not counted, as DRF counts no refused
        request), else counted (the caller answers 401)."""
        if settings.API_THROTTLE_ENABLED:
            wait_s = log_add(self.key, window_s=self.window_s, now=time.time(), limit=self.limit)
            if wait_s is not None:
                raise self._refused(wait_s)
