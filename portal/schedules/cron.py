"""Cron expressions in a time zone, read by cronsim (the parser healthchecks.io runs on).

Pure: no Django. ``cron_problem`` says why an expression or a zone is refused; ``run_times`` lists the
instants a schedule fires in a half-open range ``(after, until]``, in UTC, with the zone's daylight
saving rules (cronsim's: a 02:30 run on a spring-forward day fires once, at 03:00; on a fall-back day
once, at the first 02:30).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from scheduling.engine.windows import zone_problem

__all__ = ["cron_problem", "next_run", "run_times", "zone_problem"]

MAX_CRON_CHARS = 120


def cron_problem(expression: str) -> str | None:
    """Why ``expression`` is not a five-field cron expression (None when it parses)."""
    if not isinstance(expression, str) or not expression.strip():
        return "a cron expression has five fields: minute hour day-of-month month day-of-week, e.g. '0 2 * * *'"
    if len(expression) > MAX_CRON_CHARS:
        return f"longer than {MAX_CRON_CHARS} characters"
    if len(expression.split()) != 5:
        return f"{expression!r} does not have five fields (minute hour day-of-month month day-of-week)"
    try:
        CronSim(expression, datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError as exc:
        return f"{expression!r} does not parse: {exc}"
    return None


def _iterate(expression: str, zone: str, after: datetime) -> Iterator[datetime]:
    tz = ZoneInfo(zone)
    for local in CronSim(expression, after.astimezone(tz)):
        yield local.astimezone(UTC)


def run_times(expression: str, zone: str, *, after: datetime, until: datetime, limit: int = 10_000) -> list[datetime]:
    """The instants in ``(after, until]`` the schedule fires, oldest first, at most ``limit`` (the newest kept)."""
    times: list[datetime] = []
    try:
        for at in _iterate(expression, zone, after):
            if at > until:
                break
            if at > after:
                times.append(at)
                if len(times) > limit:
                    times.pop(0)
    except (ZoneInfoNotFoundError, CronSimError):
        return []
    return times


def next_run(expression: str, zone: str, *, after: datetime) -> datetime | None:
    """The first instant after ``after`` the schedule fires (None for an expression that never does)."""
    try:
        return next((at for at in _iterate(expression, zone, after) if at > after), None)
    except (ZoneInfoNotFoundError, CronSimError, StopIteration):
        return None
