"""Python client and CLI of the GPU job portal.

>>> from gpuportal import Portal                      # doctest: +SKIP
>>> portal = Portal()  # GPUPORTAL_URL / GPUPORTAL_TOKEN, or ~/.config/gpuportal/config.toml
>>> spec = {"queue": "default", "image": "nvcr.io/nvidia/pytorch:24.08-py3", "gpu": 1, "runtime_s": 3600}
>>> portal.check(spec).verdict                         # doctest: +SKIP
'runs_now'
>>> job = portal.submit(spec)                          # doctest: +SKIP
>>> portal.wait(job).state                             # doctest: +SKIP
'Succeeded'
>>> portal.cost(job).total_usd                         # doctest: +SKIP
Decimal('3.709')
"""

from gpuportal._version import __version__
from gpuportal.client import Portal, job_id, new_idempotency_key
from gpuportal.errors import (
    AuthenticationError,
    ConfigError,
    Conflict,
    ConnectionFailed,
    NotFound,
    PermissionDenied,
    PortalError,
    RateLimited,
    ServerError,
    ServiceUnavailable,
    ValidationError,
    WaitTimeout,
)
from gpuportal.types import (
    Attempt,
    Check,
    Cost,
    Job,
    JobCost,
    JobSpec,
    Placement,
    RaySpec,
    RayWorkerGroup,
    Reason,
    RunCost,
    Suggestion,
    Transition,
    Victim,
)

__all__ = [
    "Attempt",
    "AuthenticationError",
    "Check",
    "ConfigError",
    "Conflict",
    "ConnectionFailed",
    "Cost",
    "Job",
    "JobCost",
    "JobSpec",
    "NotFound",
    "PermissionDenied",
    "Placement",
    "Portal",
    "PortalError",
    "RateLimited",
    "RaySpec",
    "RayWorkerGroup",
    "Reason",
    "RunCost",
    "ServerError",
    "ServiceUnavailable",
    "Suggestion",
    "Transition",
    "ValidationError",
    "Victim",
    "WaitTimeout",
    "__version__",
    "job_id",
    "new_idempotency_key",
]
