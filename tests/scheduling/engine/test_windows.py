"""Start windows: "start after" and daily hours in a time zone, then the cycle that obeys them.

Expected instants are written from the calendar (a zone's UTC offset on that date), not from the code."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from scheduling.engine.cycle import run_cycle
from scheduling.engine.model import Policy, ReasonKind
from scheduling.engine.windows import StartWindow, in_span, is_open, opens_at, parse_span, zone_problem

from .builders import admitted_ids, cq, job, lq, node, pending_info, snapshot


def ts(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> float:
    return datetime(year, month, day, hour, minute, tzinfo=UTC).timestamp()


NIGHT_UTC = StartWindow(daily_start_minute=20 * 60, daily_end_minute=8 * 60)
NIGHT_BERLIN = replace(NIGHT_UTC, zone="Europe/Berlin")


@pytest.mark.parametrize(
    ("minute", "start", "end", "inside"),
    [
        (20 * 60, 1200, 480, True),
        (23 * 60 + 59, 1200, 480, True),
        (0, 1200, 480, True),
        (7 * 60 + 59, 1200, 480, True),
        (8 * 60, 1200, 480, False),
        (12 * 60, 1200, 480, False),
        (9 * 60, 540, 1020, True),
        (17 * 60, 540, 1020, False),
        (5, 600, 600, True),  # start == end: all day
    ],
)
def test_a_span_wraps_midnight_when_it_ends_before_it_starts(minute, start, end, inside):
    assert in_span(minute, start, end) is inside


@pytest.mark.parametrize(
    ("now", "window", "expected"),
    [
        (ts(2026, 1, 5, 12), NIGHT_UTC, ts(2026, 1, 5, 20)),
        (ts(2026, 1, 5, 21), NIGHT_UTC, ts(2026, 1, 5, 21)),
        (ts(2026, 1, 6, 3), NIGHT_UTC, ts(2026, 1, 6, 3)),
        (ts(2026, 1, 6, 8), NIGHT_UTC, ts(2026, 1, 6, 20)),
        # Berlin is UTC+1 in January: 20:00 local is 19:00 UTC.
        (ts(2026, 1, 5, 12), NIGHT_BERLIN, ts(2026, 1, 5, 19)),
        # and UTC+2 in July: 20:00 local is 18:00 UTC.
        (ts(2026, 7, 6, 12), NIGHT_BERLIN, ts(2026, 7, 6, 18)),
        # 07:30 UTC in July is 09:30 in Berlin: closed until 18:00 UTC.
        (ts(2026, 7, 6, 7, 30), NIGHT_BERLIN, ts(2026, 7, 6, 18)),
        # "start after" alone.
        (ts(2026, 1, 5, 12), StartWindow(not_before_s=ts(2026, 1, 5, 14)), ts(2026, 1, 5, 14)),
        (ts(2026, 1, 5, 15), StartWindow(not_before_s=ts(2026, 1, 5, 14)), ts(2026, 1, 5, 15)),
        # both: after 2026-01-05 09:00 and only at night -> that evening at 20:00.
        (ts(2026, 1, 5, 1), replace(NIGHT_UTC, not_before_s=ts(2026, 1, 5, 9)), ts(2026, 1, 5, 20)),
    ],
)
def test_the_window_opens_at_the_next_local_opening(now, window, expected):
    assert opens_at(window, now) == expected
    assert is_open(window, now) is (expected == now)


def test_an_opening_in_the_skipped_spring_hour_is_the_first_instant_after_it():
    # Berlin, 2026-03-29: 02:00 local does not exist (clocks go to 03:00 = 01:00 UTC).
    window = StartWindow(daily_start_minute=2 * 60 + 30, daily_end_minute=4 * 60, zone="Europe/Berlin")
    opening = opens_at(window, ts(2026, 3, 28, 12))
    assert ts(2026, 3, 29, 0, 30) <= opening <= ts(2026, 3, 29, 1, 30)
    assert is_open(window, opening)


@pytest.mark.parametrize(
    ("text", "expected"), [("20:00-08:00", (1200, 480)), ("9:30-17:00", (570, 1020)), (" 00:00-23:59 ", (0, 1439))]
)
def test_a_span_parses(text, expected):
    assert parse_span(text) == expected


@pytest.mark.parametrize("text", ["20:00", "25:00-08:00", "20:60-08:00", "8pm-8am", "20:00-8", ""])
def test_a_bad_span_says_why(text):
    with pytest.raises(ValueError, match="not a"):
        parse_span(text)


def test_a_zone_is_checked():
    assert zone_problem("Europe/Berlin") is None
    assert "IANA" in zone_problem("Europe/Nowhere")


def test_the_cycle_holds_a_job_outside_its_window_and_admits_it_inside():
    cluster = ([node("n1", gpus=8)], [cq("q", {"A100-80GB": 8})], [lq("a", "q")])
    night = replace(job("night", "a", gpu=1), start_window=NIGHT_UTC)
    anytime = job("day", "a", gpu=1)
    noon = ts(2026, 1, 5, 12)
    plan = run_cycle(snapshot(*cluster, [night, anytime]), Policy(), noon)
    assert admitted_ids(plan) == ["day"]
    info = pending_info(plan, "night")
    assert info.reason.kind == ReasonKind.WINDOW
    assert info.reason.waits is True
    assert "20:00 and 08:00 UTC" in info.reason.message
    assert "2026-01-05 20:00 UTC" in info.reason.message
    assert info.estimated_start == ts(2026, 1, 5, 20)
    plan = run_cycle(snapshot(*cluster, [night]), Policy(), ts(2026, 1, 5, 22))
    assert admitted_ids(plan) == ["night"]


def test_a_start_after_window_names_its_opening_once():
    cluster = ([node("n1", gpus=8)], [cq("q", {"A100-80GB": 8})], [lq("a", "q")])
    later = replace(job("later", "a", gpu=1), start_window=StartWindow(not_before_s=ts(2026, 1, 5, 18, 30)))
    info = pending_info(run_cycle(snapshot(*cluster, [later]), Policy(), ts(2026, 1, 5, 12)), "later")
    assert info.reason.message == "waits for its start window: not before 2026-01-05 18:30 UTC"
    assert info.estimated_start == ts(2026, 1, 5, 18, 30)


def test_a_job_held_by_its_window_leaves_its_quota_to_others():
    cluster = ([node("n1", gpus=8)], [cq("q", {"A100-80GB": 4})], [lq("a", "q")])
    night = replace(job("night", "a", gpu=4, priority=100), start_window=NIGHT_UTC)
    plan = run_cycle(snapshot(*cluster, [night, job("low", "a", gpu=4, priority=0)]), Policy(), ts(2026, 1, 5, 12))
    assert admitted_ids(plan) == ["low"]
