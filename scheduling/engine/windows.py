"""Start windows: when a pending job may be admitted ("start after", "only between 20:00 and 08:00").

A window is an optional earliest start (POSIX seconds) and an optional daily span of local wall-clock
minutes in an IANA zone. A span whose end is before its start wraps midnight (20:00-08:00 is open from
20:00 to 08:00 the next morning); start == end is open all day. The zone's daylight saving rules apply:
the span is read on the local clock of each day. The window only gates admission: a job admitted inside
it runs to the end (the engine never stops a running job for its window).

Steps of ``opens_at(window, now)``:

1. Before ``not_before_s``: the answer is at least ``not_before_s``; continue from there.
2. No daily span: open from there on.
3. Inside the span at that instant (local minute of day, wrapping spans tested on both sides of
   midnight): open now.
4. Otherwise the span's next start on the local clock: today's if still to come, else tomorrow's.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from zoneinfo import ZoneInfo, available_timezones

MINUTES_PER_DAY = 24 * 60


@dataclass(frozen=True, slots=True)
class StartWindow:
    not_before_s: float | None = None  # "start after"
    daily_start_minute: int | None = None  # local minute of day the span opens, 0..1439
    daily_end_minute: int | None = None  # local minute of day it closes (exclusive)
    zone: str = "UTC"

    @property
    def daily(self) -> bool:
        return self.daily_start_minute is not None and self.daily_end_minute is not None


def in_span(minute: int, start: int, end: int) -> bool:
    """Is a local minute of day inside the span [start, end), wrapping midnight when end < start."""
    if start == end:
        return True
    if start < end:
        return start <= minute < end
    return minute >= start or minute < end


def opens_at(window: StartWindow, now: float) -> float:
    """The first instant at or after ``now`` at which the window is open (POSIX seconds)."""
    at = max(now, window.not_before_s) if window.not_before_s is not None else now
    start, end = window.daily_start_minute, window.daily_end_minute
    if start is None or end is None:
        return at
    zone = ZoneInfo(window.zone)
    local = datetime.fromtimestamp(at, UTC).astimezone(zone)
    minute = local.hour * 60 + local.minute
    if in_span(minute, start, end):
        return at
    day = local.date()
    for offset in (0, 1, 2):  # a DST jump can push the local opening minute past one day's end
        opening = datetime.combine(day + timedelta(days=offset), datetime.min.time(), zone) + timedelta(minutes=start)
        # Wall-clock arithmetic: normalise a non-existent local time (spring forward) through UTC.
        opening_utc = opening.astimezone(UTC).timestamp()
        if opening_utc > at:
            return opening_utc
    return at  # pragma: no cover - an opening always exists within two days


def is_open(window: StartWindow | None, now: float) -> bool:
    return window is None or opens_at(window, now) <= now


def describe(window: StartWindow) -> str:
    """The window in words: ``only between 20:00 and 08:00 Europe/Berlin``, ``after 2026-01-05 20:00 UTC``."""
    parts = []
    if window.not_before_s is not None:
        parts.append(f"after {datetime.fromtimestamp(window.not_before_s, UTC):%Y-%m-%d %H:%M} UTC")
    if window.daily:
        start, end = window.daily_start_minute or 0, window.daily_end_minute or 0
        parts.append(
            f"only between {start // 60:02d}:{start % 60:02d} and {end // 60:02d}:{end % 60:02d} {window.zone}"
        )
    return ", ".join(parts) or "any time"


def parse_span(text: str) -> tuple[int, int]:
    """``"20:00-08:00"`` → (1200, 480). Raises ``ValueError`` with the reason."""
    start_text, sep, end_text = text.strip().partition("-")
    if not sep:
        raise ValueError(f"{text!r} is not a span like 20:00-08:00")
    return _minute(start_text), _minute(end_text)


def _minute(text: str) -> int:
    hours, sep, minutes = text.strip().partition(":")
    if not (sep and hours.isdigit() and minutes.isdigit() and len(minutes) == 2 and 1 <= len(hours) <= 2):
        raise ValueError(f"{text.strip()!r} is not a time like 20:00")
    if int(hours) > 23 or int(minutes) > 59:
        raise ValueError(f"{text.strip()!r} is not a time of day (00:00 to 23:59)")
    return int(hours) * 60 + int(minutes)


@cache
def _zones() -> frozenset[str]:
    return frozenset(available_timezones()) | {"UTC"}


def zone_problem(name: str) -> str | None:
    """Why ``name`` is not an IANA time zone this machine knows (None when it is)."""
    if not isinstance(name, str) or not name or len(name) > 64 or name not in _zones():
        return f"{str(name)[:64]!r} is not an IANA time zone such as UTC or Europe/Berlin"
    return None
