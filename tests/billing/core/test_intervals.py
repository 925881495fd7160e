"""Running intervals from job histories (``billing.core.intervals``): the one builder."""

from __future__ import annotations

from datetime import timedelta

from billing.core.intervals import RunInterval, Transition, intervals_in_view, metered_intervals, run_intervals
from tests.billing.conftest import utc

T0 = utc(2026, 10, 5, 9)
A100 = {"gpu_model": "A100-80GB", "gpus": "2"}


def at(minutes: int):
    return T0 + timedelta(minutes=minutes)


def history(job_id: int, *steps: tuple[int, bool]) -> list[Transition]:
    """(minutes after T0, to Running?) per transition."""
    return [Transition(job_id, at(m), running, A100 if running else {}) for m, running in steps]


def test_an_interval_opens_at_running_and_closes_at_the_next_transition_of_any_kind():
    rows = history(1, (0, False), (5, True), (65, False), (65, False), (90, False), (95, True), (100, False))
    assert run_intervals(rows) == [RunInterval(1, at(5), at(65), A100), RunInterval(1, at(95), at(100), A100)]


def test_an_interval_still_running_at_the_end_of_the_history_is_left_open():
    rows = [*history(1, (0, True), (30, False)), *history(2, (10, True)), *history(3, (20, True), (40, False))]
    assert run_intervals(rows) == [
        RunInterval(1, at(0), at(30), A100),
        RunInterval(2, at(10), None, A100),
        RunInterval(3, at(20), at(40), A100),
    ]


def test_an_interval_of_no_length_is_dropped():
    assert run_intervals(history(1, (5, True), (5, False), (9, True), (8, False))) == []


def test_the_sweeper_closes_an_open_interval_of_a_job_that_stopped_and_waits_for_a_running_one():
    intervals = run_intervals(history(1, (0, True), (10, False), (20, True)))
    assert metered_intervals(intervals, job_running=True, closed_at=at(50)) == [RunInterval(1, at(0), at(10), A100)]
    assert metered_intervals(intervals, job_running=False, closed_at=at(50)) == [
        RunInterval(1, at(0), at(10), A100),
        RunInterval(1, at(20), at(50), A100),
    ]
    assert metered_intervals(intervals, job_running=False, closed_at=None) == intervals[:1]
    assert metered_intervals(intervals, job_running=False, closed_at=at(20)) == intervals[:1]


def test_the_view_of_a_window_cuts_intervals_at_its_start_and_ends_open_ones_now():
    intervals = [
        RunInterval(1, at(0), at(30), A100),  # ends before the window
        RunInterval(2, at(10), at(70), A100),  # began before it
        RunInterval(3, at(50), None, A100),  # still running
        RunInterval(4, at(55), at(58), A100),
    ]
    assert intervals_in_view(intervals, since=at(30), now=at(90)) == [
        RunInterval(2, at(30), at(70), A100),
        RunInterval(4, at(55), at(58), A100),
        RunInterval(3, at(50), at(90), A100),
    ]
