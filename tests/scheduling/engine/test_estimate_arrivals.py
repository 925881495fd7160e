"""Estimated starts worked by hand from the rule (docs/engine.md, "Estimated start"): running jobs end
at their expected end, waiting jobs start in the cycle's order where they fit (a gang needs all its
nodes at once), the expected runtime comes from the team's history, and the forecast expects the last
period's submissions again."""

from __future__ import annotations

import pytest

from scheduling.engine.cycle import run_cycle
from scheduling.engine.estimate import runtime_from_history
from scheduling.engine.model import Policy, Workload

from .builders import cq, job, lq, node, pending_info, running, snapshot

NOW = 10_000.0
QUEUE = [cq("q", {"A100-80GB": 64})]
NODES = [node("n1", gpus=8), node("n2", gpus=8)]
BUSY = [
    running("r1", "a", [("n1", tuple(range(8)))], started=NOW - 200, runtime=1200),  # ends at +1000
    running("r2", "a", [("n2", tuple(range(8)))], started=NOW - 600, runtime=3600),  # ends at +3000
]
GANG = job("gang", "a", gpu=8, replicas=2, runtime_s=600, created=NOW - 100)


def test_two_full_nodes_a_gang_waits_for_both_and_a_later_8_gpu_job_takes_the_first_one():
    # +1000: n1 free; the gang (first in order) needs both nodes, so "single" (8 GPUs, 500 s) starts on
    # n1 and ends at +1500. +3000: n2 ends too, both nodes are free: the gang starts.
    single = job("single", "a", gpu=8, runtime_s=500, created=NOW - 50)
    snap = snapshot(NODES, QUEUE, [lq("a", "q")], [*BUSY, GANG, single])
    plan = run_cycle(snap, Policy(), NOW)
    assert pending_info(plan, "single").estimated_start == NOW + 1000
    assert pending_info(plan, "gang").estimated_start == NOW + 3000


def _far_ends(second_end: float) -> list[Workload]:
    """n1's job ends at +10000, n2's at ``second_end``; a gang (2 x 8 GPUs, 600 s) waits, then an 8-GPU
    job of 2000 s."""
    return [
        running("f1", "a", [("n1", tuple(range(8)))], started=NOW, runtime=10_000),
        running("f2", "a", [("n2", tuple(range(8)))], started=NOW, runtime=second_end),
        job("gang", "a", gpu=8, replicas=2, runtime_s=600, created=NOW - 100),
        job("single", "a", gpu=8, runtime_s=2000, created=NOW - 50),
    ]


def test_ends_further_apart_than_one_percent_of_the_time_ahead_are_separate_steps():
    # +10000: n1 alone is free; the gang needs both nodes, so "single" starts on n1 and holds it until
    # +12000. +10300 (3 % of the time ahead later): n2 is free, n1 is not. +12000: the gang starts.
    # (Taking ends 5 % apart together, as the forecast once did, started the gang at +10000.) Without
    # reservations: with one, "single" (2000 s, past the gang's shadow time) may not take n1
    # (test_reservations).
    plan = run_cycle(snapshot(NODES, QUEUE, [lq("a", "q")], _far_ends(10_300)), Policy(reserved_jobs=0), NOW)
    assert pending_info(plan, "single").estimated_start == NOW + 10_000
    assert pending_info(plan, "gang").estimated_start == NOW + 12_000


def test_ends_within_one_percent_of_the_time_ahead_are_taken_together():
    # +10000 and +10050 are within 1 % of 10000 s ahead (100 s): one step at +10000 with both nodes
    # free; the gang, first in order, starts then and ends at +10600, when "single" starts.
    plan = run_cycle(snapshot(NODES, QUEUE, [lq("a", "q")], _far_ends(10_050)), Policy(), NOW)
    assert pending_info(plan, "gang").estimated_start == NOW + 10_000
    assert pending_info(plan, "single").estimated_start == NOW + 10_600


def test_expected_runtimes_from_history_set_the_ends():
    # The snapshot's runtimes (P50, P90) replace the request: r2 is expected to end at
    # NOW - 600 + 2000 = +1400 (P50) and NOW - 600 + 2600 = +2000 (P90); r1 at +1000 either way.
    snap = snapshot(NODES, QUEUE, [lq("a", "q")], [*BUSY, GANG], runtimes=(("r2", 2000.0, 2600.0),))
    info = pending_info(run_cycle(snap, Policy(), NOW), "gang")
    assert (info.estimated_start, info.estimated_start_p90) == (NOW + 1400, NOW + 2000)


def test_a_running_job_past_its_p50_is_expected_at_its_p90():
    # r2 started 3000 s ago; its P50 (2000) is behind it, its P90 (3500) ends it at +500.
    busy = [BUSY[0], running("r2", "a", [("n2", tuple(range(8)))], started=NOW - 3000, runtime=3600)]
    snap = snapshot(NODES, QUEUE, [lq("a", "q")], [*busy, GANG], runtimes=(("r2", 2000.0, 3500.0),))
    assert pending_info(run_cycle(snap, Policy(), NOW), "gang").estimated_start == NOW + 1000


def test_expected_submissions_take_a_freed_node_before_a_waiting_gang():
    # "last" (8 GPUs, runs 2500 s) was submitted 1800 s ago: with a period of 3600 s the forecast expects
    # its like again at +1800. n1 is free from +1000, the gang needs both nodes, so the expected job
    # starts on n1 at +1800 and holds it until +4300; n2 frees at +3000; the gang starts at +4300.
    # Without expected submissions the gang starts at +3000. Without reservations: with one, the gang
    # holds n1 from +1000 and the expected job (2500 s, past +3000) may not take it (test_reservations).
    last = job("last", "a", gpu=8, runtime_s=3600, created=NOW - 1800)
    old = job("old", "a", gpu=8, runtime_s=3600, created=NOW - 3700)  # before the period: not expected
    runtimes = (("last", 2500.0, 2500.0), ("old", 100.0, 100.0))
    snap = snapshot(NODES, QUEUE, [lq("a", "q")], [*BUSY, GANG], runtimes=runtimes, recent=(last, old))
    expecting = run_cycle(snap, Policy(arrival_period_s=3600, reserved_jobs=0), NOW)
    assert pending_info(expecting, "gang").estimated_start == NOW + 4300
    assert [p.workload_id for p in expecting.pending] == ["gang"]  # expected jobs get no estimate
    assert pending_info(run_cycle(snap, Policy(arrival_period_s=0, reserved_jobs=0), NOW), "gang").estimated_start == (
        NOW + 3000
    )


def test_expected_submissions_beyond_the_horizon_are_not_expected():
    # The like of "last" is expected at +1800, after a horizon of 1000 s: the gang starts at +3000.
    last = job("last", "a", gpu=8, runtime_s=3600, created=NOW - 1800)
    snap = snapshot(NODES, QUEUE, [lq("a", "q")], [*BUSY, GANG], runtimes=(("last", 2500.0, 2500.0),), recent=(last,))
    plan = run_cycle(snap, Policy(arrival_period_s=3600, arrival_horizon_s=1000), NOW)
    assert pending_info(plan, "gang").estimated_start == NOW + 3000


@pytest.mark.parametrize(
    ("requested", "history", "expected"),
    [
        # No history: the request.
        (3600, [], (3600, 3600)),
        # Three runs of the same request: their P50 and P90 (2000 + 0.8 * (2200 - 2000)).
        (3600, [(3600, 1800), (3600, 2000), (3600, 2200)], (2000, 2160)),
        # None of the same request: the request times the team's run/request ratios, P50 1000/1800 and
        # P90 1000/1800 + 0.8 * (1100/1800 - 1000/1800) = 0.6.
        (7200, [(1800, 900), (1800, 1000), (1800, 1100)], (4000, 4320)),
    ],
)
def test_runtime_from_history(requested, history, expected):
    p50, p90 = runtime_from_history(requested, history)
    assert p50 == pytest.approx(expected[0])
    assert p90 == pytest.approx(expected[1])
