"""What can go wrong talking to the portal, one exception class per kind of answer.

Every error is a ``PortalError`` carrying the HTTP ``status`` (``None`` when no answer came), the
portal's ``detail`` sentence and, for a refused request, ``errors``: the fields the portal named, each
with its messages (``{"gpu_milli": ["set only one of ..."]}``; nested fields are dotted paths such as
``tolerations.0.key``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuportal.types import Reason


class PortalError(Exception):
    """Base class of every error the client raises."""

    def __init__(
        self,
        detail: str,
        *,
        status: int | None = None,
        errors: Mapping[str, list[str]] | None = None,
        body: Any = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.status = status
        self.errors: dict[str, list[str]] = dict(errors or {})
        self.body = body
        self.retry_after = retry_after

    @property
    def reason(self) -> Reason | None:
        """The scheduler's reason the portal attached (a job that can never run as configured: its
        ``kind``, ``message``, ``waits`` False and ``details`` naming the limit)."""
        return Reason.optional(self.body.get("reason")) if isinstance(self.body, Mapping) else None

    def __str__(self) -> str:
        head = f"{self.status} {self.detail}" if self.status else self.detail
        named = [f"{field}: {'; '.join(messages)}" for field, messages in self.errors.items()]
        # The portal's detail already names the first field; list them all when there are several.
        if len(named) > 1:
            return head + " (" + " | ".join(named) + ")"
        return head


class ConfigError(PortalError):
    """No portal URL or token could be found (arguments, environment, config file), or they are malformed."""


class ValidationError(PortalError):
    """400, 413 or 422: the portal refused the request; ``errors`` names each field and why."""


class AuthenticationError(PortalError):
    """401: the token is missing, unknown, expired or revoked."""


class PermissionDenied(PortalError):
    """403: the token's user may not do this (e.g. cancel another member's job)."""


class NotFound(PortalError):
    """404: no such job, or one of a team you are not a member of (the portal does not say which)."""


class Conflict(PortalError):
    """409: the request clashes with the job's state (cancelling a finished job) or a queue's limit."""


class RateLimited(PortalError):
    """429 after the client's bounded retries; ``retry_after`` is the portal's last ``Retry-After``."""


class ServiceUnavailable(PortalError):
    """503 after the client's bounded retries (e.g. the portal's database is unreachable)."""


class ServerError(PortalError):
    """Another 5xx answer."""


class ConnectionFailed(PortalError):
    """No answer: the portal could not be reached, or the connection broke, after bounded retries."""


class WaitTimeout(PortalError, TimeoutError):
    """``Portal.wait`` gave up before the job finished; ``job`` is the job as last seen."""

    def __init__(self, detail: str, *, job: Any) -> None:
        super().__init__(detail)
        self.job = job


STATUS_ERRORS: dict[int, type[PortalError]] = {
    400: ValidationError,
    401: AuthenticationError,
    403: PermissionDenied,
    404: NotFound,
    409: Conflict,
    413: ValidationError,
    422: ValidationError,
    429: RateLimited,
    503: ServiceUnavailable,
}


def flatten_errors(errors: Any, prefix: str = "") -> dict[str, list[str]]:
    """The portal's ``errors`` (DRF's nested shape) as ``{dotted.field: [messages]}``."""
    out: dict[str, list[str]] = {}
    if isinstance(errors, Mapping):
        for key, value in errors.items():
            out.update(flatten_errors(value, f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(errors, list) and errors and all(isinstance(e, str) for e in errors):
        out[prefix or "non_field_errors"] = list(errors)
    elif isinstance(errors, list):
        for index, value in enumerate(errors):
            if value:
                out.update(flatten_errors(value, f"{prefix}.{index}" if prefix else str(index)))
    elif errors not in (None, ""):
        out[prefix or "non_field_errors"] = [str(errors)]
    return out


def error_for(status: int, body: Any, *, retry_after: float | None = None) -> PortalError:
    """The exception for an error answer: its class by status, its detail and fields from the body."""
    cls = STATUS_ERRORS.get(status) or (ServerError if status >= 500 else PortalError)
    if isinstance(body, Mapping):
        errors = flatten_errors(body.get("errors") or {})
        detail = str(body.get("detail") or "") or _first(errors) or f"HTTP {status}"
    else:
        errors = {}
        text = " ".join(str(body or "").split())
        detail = text[:200] or f"HTTP {status}"
    return cls(detail, status=status, errors=errors, body=body, retry_after=retry_after)


def _first(errors: Mapping[str, list[str]]) -> str:
    for field, messages in errors.items():
        return f"{field}: {messages[0] if messages else ''}"
    return ""
