"""API throttles (DRF): per user, per client address, and failed token authentications per address.

Rates come from settings at request time (``API_THROTTLE_*``), so a test or a benchmark can change
them without reloading DRF. A throttled request is a 429 with ``Retry-After`` (DRF's ``Throttled``).
Counters live in the default cache (Redis when ``REDIS_URL`` is set, shared by all web processes).
"""

from __future__ import annotations

import time

from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured
from rest_framework.exceptions import Throttled
from rest_framework.throttling import SimpleRateThrottle


class _SettingsRateThrottle(SimpleRateThrottle):
    setting = ""

    def get_rate(self) -> str:
        return str(getattr(settings, self.setting))

    def parse_rate(self, rate) -> tuple[int, int]:
        limit, window_s = super().parse_rate(rate)
        if limit is None or window_s is None:
            raise ImproperlyConfigured(f"{self.setting}={rate!r}: a rate like 100/min")
        return limit, window_s

    def allow_request(self, request, view) -> bool:
        if not settings.API_THROTTLE_ENABLED:
            return True
        return super().allow_request(request, view)


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
        now = time.time()
        history = [at for at in cache.get(self.key, []) if at > now - self.window_s]
        if len(history) >= self.limit:
            raise Throttled(wait=max(1.0, self.window_s - (now - history[-1])), detail="too many failed logins")

    def record(self) -> None:
        if not settings.API_THROTTLE_ENABLED:
            return
        now = time.time()
        history = [at for at in cache.get(self.key, []) if at > now - self.window_s]
        history.insert(0, now)
        cache.set(self.key, history, self.window_s)
