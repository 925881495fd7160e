"""HTTP to the portal's REST API: the token header, JSON, error mapping and bounded retries.

Retry policy (``Transport.request``):

1. 429 and 503 are retried for every method: the portal answers them before doing anything (throttles
   run before the view; the database-outage guard answers instead of it). The wait is the answer's
   ``Retry-After`` (seconds or an HTTP date); a ``Retry-After`` longer than ``max_retry_wait_s`` is not
   waited for: the error is raised at once with ``retry_after`` set, so a script can decide.
2. No answer (connection refused or broken, a read time-out) and 502/504 from a proxy are retried only
   for requests that are safe to repeat: reads, and writes the caller marks ``retry_unsafe`` because
   they are idempotent (a submit carries an ``Idempotency-Key``: the portal answers a repeat with the
   first job).
3. Back-off without ``Retry-After``: 0.5 s doubling up to 8 s, plus up to 25 % jitter.
4. At most ``max_retries`` retries; then the last error is raised.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import requests
from urllib3.exceptions import ConnectTimeoutError, NewConnectionError

from gpuportal._version import __version__
from gpuportal.errors import ConfigError, ConnectionFailed, PortalError, error_for

RETRY_ALWAYS = frozenset({429, 503})  # answered before the portal acts
RETRY_IF_SAFE = frozenset({502, 504})  # a proxy's answer: the portal may or may not have acted
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
API_PREFIX = "/api/v1/"


def api_root(url: str) -> str:
    """``https://host[:port][/prefix]`` → its API root ``…/api/v1/`` (a URL already ending in it is kept)."""
    url = (url or "").strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"portal URL must be http(s)://host[:port][/path], got {url!r}")
    path = parts.path.rstrip("/")
    if path.endswith(API_PREFIX.rstrip("/")):
        path = path[: -len(API_PREFIX.rstrip("/"))]
    return f"{parts.scheme}://{parts.netloc}{path}{API_PREFIX}"


def retry_after_s(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or HTTP-date); None if absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


class Transport:
    """One portal, one token, one ``requests`` session (connection reuse)."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout_s: float = 30.0,
        max_retries: int = 5,
        max_retry_wait_s: float = 60.0,
        session: requests.Session | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not token or not token.strip():
            raise ConfigError("no API token: create one on the portal's Tokens page (/account/tokens/)")
        self.root = api_root(url)
        self.timeout_s = timeout_s
        self.max_retries = max(0, max_retries)
        self.max_retry_wait_s = max_retry_wait_s
        self.sleep = sleep
        self.session = session or requests.Session()
        self.session.headers.update(
            {
                "Authorization": f"Token {token.strip()}",
                "Accept": "application/json",
                "User-Agent": f"gpuportal-python/{__version__}",
            }
        )

    def close(self) -> None:
        self.session.close()

    def url(self, path: str) -> str:
        return self.root + path.lstrip("/")

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
        retry_unsafe: bool = False,
    ) -> tuple[Any, requests.Response]:
        """Send a request (see the module docstring for retries); the decoded JSON body and the answer.

        Raises the ``PortalError`` subclass of the final error answer, or ``ConnectionFailed``.
        """
        method = method.upper()
        repeatable = method in SAFE_METHODS or retry_unsafe
        attempt = 0
        while True:
            try:
                response = self.session.request(
                    method, self.url(path), params=params, json=json, headers=headers, timeout=self.timeout_s
                )
            except requests.RequestException as exc:
                # A connection that was never made cannot have acted: always safe to try again.
                if attempt < self.max_retries and (repeatable or _never_sent(exc)):
                    self.sleep(self._backoff(attempt))
                    attempt += 1
                    continue
                raise ConnectionFailed(f"could not reach the portal at {self.root}: {exc}") from exc
            status = response.status_code
            if status < 400:
                return _body(response), response
            wait_s = retry_after_s(response.headers.get("Retry-After"))
            error = error_for(status, _body(response), retry_after=wait_s)
            retryable = status in RETRY_ALWAYS or (status in RETRY_IF_SAFE and repeatable)
            if not retryable or attempt >= self.max_retries:
                raise error
            if wait_s is None:
                wait_s = self._backoff(attempt)
            elif wait_s > self.max_retry_wait_s:
                raise error
            self.sleep(wait_s)
            attempt += 1

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None})[0]

    @staticmethod
    def _backoff(attempt: int) -> float:
        base = min(8.0, 0.5 * 2.0**attempt)
        return base * (1 + random.random() / 4)  # jitter: many clients retrying do not retry in step


def _never_sent(exc: requests.RequestException) -> bool:
    """The connection was refused or never established: the portal received nothing."""
    if isinstance(exc, requests.ConnectTimeout):
        return True
    if not isinstance(exc, requests.ConnectionError) or isinstance(exc, requests.ReadTimeout):
        return False
    reason = getattr(exc.args[0], "reason", None) if exc.args else None
    return isinstance(reason, NewConnectionError | ConnectTimeoutError)


def _body(response: requests.Response) -> Any:
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        return response.text


__all__ = ["PortalError", "Transport", "api_root", "retry_after_s"]
