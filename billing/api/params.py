"""Query parameters of the cost API and pages: OpenCost windows, steps, aggregates, booleans.

Each parser raises ``WindowError`` with a message that says what is wrong; the API answers 400 with it.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta

from billing.core.units import hours_between
from billing.core.windows import MAX_WINDOW, Window, ceil_hour, day_start, floor_hour, month_start

DURATION_RE = re.compile(r"^(\d+)([mhdw])$")
UNIT_S = {"m": 60, "h": 3600, "d": 86_400, "w": 604_800}
AGGREGATES = ("namespace", "team", "queue", "cluster_queue", "job", "gpu_model", "capacity_type")
MAX_STEPS = 10_000


class WindowError(ValueError):
    """A window, step or aggregate the allocation API cannot read; the message says why."""


def parse_duration_s(text: str) -> int:
    match = DURATION_RE.match(text.strip())
    if not match:
        raise WindowError(f"{text!r} is not a duration like 1h, 1d or 7d")
    return int(match.group(1)) * UNIT_S[match.group(2)]


def _parse_instant(text: str) -> datetime:
    text = text.strip().upper()
    if text.isdigit():
        return datetime.fromtimestamp(int(text), tz=UTC)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise WindowError(f"{text!r} is neither an RFC 3339 time nor a Unix timestamp") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def parse_window(text: str, now: datetime) -> Window:
    """OpenCost windows, aligned to whole UTC hours: ``7d``, ``24h``, ``today``, ``week``, ``month``,
    ``lastmonth``, or ``start,end`` (RFC 3339 or Unix seconds). Relative windows end at the end of the
    current hour, so usage up to ``now`` is included.
    """
    text = (text or "").strip().lower()
    try:
        start, end = _window_bounds(text, now.astimezone(UTC))
    except WindowError:
        raise
    except (ValueError, OverflowError, OSError):  # a date past what datetime can hold
        raise WindowError(f"{text!r} is not a window between the years 1 and 9999") from None
    if start >= end:
        raise WindowError("the window's start must be before its end")
    if end - start > MAX_WINDOW:
        raise WindowError("windows are limited to 400 days")
    return start, end


def _window_bounds(text: str, now: datetime) -> Window:
    end = ceil_hour(now)
    if text in ("", "today"):
        start = day_start(now)
    elif text == "yesterday":
        end = day_start(now)
        start = end - timedelta(days=1)
    elif text == "week":
        start = day_start(now) - timedelta(days=now.weekday())
    elif text == "month":
        start = month_start(now)
    elif text == "lastmonth":
        end = month_start(now)
        start = month_start(end - timedelta(days=1))
    elif "," in text:
        first, second = text.split(",", 1)
        start = floor_hour(_parse_instant(first).astimezone(UTC))
        end = ceil_hour(_parse_instant(second).astimezone(UTC))
    else:
        seconds = parse_duration_s(text)
        if seconds < 3600:
            raise WindowError("the shortest window is 1h")
        if seconds > MAX_WINDOW.total_seconds():
            raise WindowError("windows are limited to 400 days")
        start = end - timedelta(seconds=seconds)
    return start, end


def parse_step_hours(text: str | None, window: Window) -> int:
    """Step in whole hours; none means one step covering the whole window (OpenCost ``accumulate``)."""
    window_hours = hours_between(*window)
    if not text:
        return window_hours
    seconds = parse_duration_s(text)
    if seconds % 3600:
        raise WindowError("steps are whole hours (1h, 6h, 1d, 1w)")
    hours = seconds // 3600
    if not 1 <= hours <= MAX_WINDOW.days * 24:
        raise WindowError("steps are between 1h and 400 days")
    if math.ceil(window_hours / hours) > MAX_STEPS:
        raise WindowError("too many steps: use a longer step or a shorter window")
    return hours


def parse_aggregate(text: str | None) -> str:
    text = (text or "namespace").strip()
    if text.startswith("label:"):
        key = text.removeprefix("label:")
        if not key or len(key) > 317:
            raise WindowError("label aggregation needs a key: label:<key>")
        return text
    if text not in AGGREGATES:
        raise WindowError(f"aggregate must be one of {', '.join(AGGREGATES)} or label:<key>")
    return text


def parse_bool(text: str | None, default: bool) -> bool:
    if text is None or text == "":
        return default
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes"):
        return True
    if lowered in ("0", "false", "no"):
        return False
    raise WindowError(f"{text!r} is not true or false")
