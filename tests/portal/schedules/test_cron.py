from datetime import UTC, datetime

import pytest

from portal.schedules.cron import cron_problem, next_run, run_times, zone_problem


def at(year: int, month: int, day: int, hour: int = 0) -> datetime:
    return datetime(year, month, day, hour, tzinfo=UTC)


@pytest.mark.parametrize(
    ("expression", "words"),
    [
        ("", "five fields"),
        ("0 2 * *", "five fields"),
        ("61 * * * *", "does not parse"),
        ("0 25 * * *", "does not parse"),
        ("* * * * * *", "five fields"),
        ("0 2 * * mon-xyz", "does not parse"),
    ],
)
def test_an_expression_that_does_not_parse_is_named(expression, words):
    assert words in cron_problem(expression)


def test_a_good_expression_has_no_problem():
    assert cron_problem("*/15 20-23,0-7 * * 1-5") is None


def test_an_unknown_zone_is_named():
    assert "IANA" in zone_problem("Mars/Olympus")
    assert zone_problem("Europe/Berlin") is None
    assert zone_problem("UTC") is None


def test_two_in_the_morning_berlin_is_one_utc_in_winter_and_midnight_in_summer():
    winter = run_times("0 2 * * *", "Europe/Berlin", after=at(2026, 1, 10), until=at(2026, 1, 11, 12))
    summer = run_times("0 2 * * *", "Europe/Berlin", after=at(2026, 7, 9, 12), until=at(2026, 7, 11, 12))
    assert winter == [at(2026, 1, 10, 1), at(2026, 1, 11, 1)]
    assert summer == [at(2026, 7, 10, 0), at(2026, 7, 11, 0)]


def test_the_range_is_half_open():
    assert run_times("0 * * * *", "UTC", after=at(2026, 1, 1, 1), until=at(2026, 1, 1, 3)) == [
        at(2026, 1, 1, 2),
        at(2026, 1, 1, 3),
    ]


def test_a_run_in_the_skipped_spring_hour_fires_once_that_day():
    # 2026-03-29: Berlin jumps from 02:00 to 03:00; 02:30 does not exist that day.
    times = run_times("30 2 * * *", "Europe/Berlin", after=at(2026, 3, 28, 12), until=at(2026, 3, 30, 12))
    assert len(times) == 2
    assert times[0].date().isoformat() == "2026-03-29"


def test_next_run_is_after_the_given_instant():
    assert next_run("0 20 * * *", "UTC", after=at(2026, 1, 1, 20)) == at(2026, 1, 2, 20)
