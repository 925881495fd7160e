"""Windows and steps as values: hour-aligned UTC intervals, calendar months, step windows.

A window is a ``(start, end)`` pair of aware UTC datetimes, ``start < end``; allocation windows start
and end on whole hours. Steps are whole hours; the last step of a window may be shorter.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

Window = tuple[datetime, datetime]

MAX_WINDOW = timedelta(days=400)


def ceil_hour(moment: datetime) -> datetime:
    floored = moment.replace(minute=0, second=0, microsecond=0)
    return floored if floored == moment else floored + timedelta(hours=1)


def floor_hour(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def day_start(moment: datetime) -> datetime:
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


def month_start(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def next_month(moment: datetime) -> datetime:
    start = month_start(moment)
    return (start + timedelta(days=32)).replace(day=1)


def step_windows(start: datetime, end: datetime, step_hours: int) -> list[Window]:
    windows = []
    cursor = start
    while cursor < end:
        nxt = cursor + min(timedelta(hours=step_hours), end - cursor)  # never past ``end``: no overflow near year 9999
        windows.append((cursor, nxt))
        cursor = nxt
    return windows


def month_to_date(now: datetime) -> Window:
    """This calendar month (UTC) up to the end of the hour of ``now`` (at least one hour)."""
    start = month_start(now)
    return start, start + timedelta(hours=max(1, -(-int((now - start).total_seconds()) // 3600)))


def invoice_month(month: datetime) -> Window:
    """The calendar month (UTC) that ``month`` falls in."""
    start = month_start(month)
    return start, min(next_month(start), start + timedelta(days=31))
