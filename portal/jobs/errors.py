from __future__ import annotations

from kombu.exceptions import OperationalError as KombuOperationalError
from redis.exceptions import RedisError

# What a broker that is down or unreachable raises when a task is sent.
BROKER_ERRORS: tuple[type[BaseException], ...] = (KombuOperationalError, RedisError, OSError)


class ServiceError(Exception):
    """A business-rule refusal from a service, naming the field at fault. Maps to a 4xx response."""

    status_code = 400
    reason: dict | None = None  # the engine's reason (kind, message, details, waits), when it decided

    def __init__(self, message: str, *, field: str | None = None, status_code: int | None = None) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.message = message
        self.field = field
        if status_code is not None:
            self.status_code = status_code
