"""Query parameters (``billing.api.params``): OpenCost windows and whole-hour steps."""

from __future__ import annotations

import pytest

from billing.api.params import WindowError, parse_step_hours, parse_window
from tests.billing.conftest import utc

NOW = utc(2026, 11, 21, 6, 20, 5)


@pytest.mark.parametrize(
    ("text", "start", "end"),
    [
        ("7d", utc(2026, 11, 14, 7), utc(2026, 11, 21, 7)),
        ("24h", utc(2026, 11, 20, 7), utc(2026, 11, 21, 7)),
        ("today", utc(2026, 11, 21), utc(2026, 11, 21, 7)),
        ("month", utc(2026, 11, 1), utc(2026, 11, 21, 7)),
        ("lastmonth", utc(2026, 10, 1), utc(2026, 11, 1)),
        ("2026-10-01T00:00:00Z,2026-10-02T00:00:00Z", utc(2026, 10, 1), utc(2026, 10, 2)),
        ("1759276800,1759363200", utc(2025, 10, 1), utc(2025, 10, 2)),
    ],
)
def test_windows_are_read_like_opencost_and_aligned_to_hours(text, start, end):
    assert parse_window(text, NOW) == (start, end)


@pytest.mark.parametrize(
    "text",
    [
        "7x",
        "30m",
        "2026-10-02,2026-10-01",
        "soon",
        "401d",
        "1000000d",
        "99999999999999999999d",
        "99999999999999,1",
        "0001-01-01T00:00:00+01:00,0001-01-02T00:00:00Z",
        "9999-12-31T23:30:00Z,9999-12-31T23:50:00Z",
    ],
)
def test_unreadable_windows_say_why(text):
    with pytest.raises(WindowError):
        parse_window(text, NOW)


def test_steps_are_whole_hours():
    window = parse_window("7d", NOW)
    assert parse_step_hours("1d", window) == 24
    assert parse_step_hours(None, window) == 7 * 24
    with pytest.raises(WindowError, match="whole hours"):
        parse_step_hours("30m", window)
    for text in ("0h", "0d", "401d", "99999999999h"):
        with pytest.raises(WindowError, match="between 1h and 400 days"):
            parse_step_hours(text, window)
