"""Estimated starts worked by hand from the rule (docs/engine.md, "Estimated start"): running jobs end
at their expected end, waiting jobs start in the cycle's order where they fit (a gang needs all its
nodes at once), the expected runtime comes from the team's history, and the forecast expects the last
period's submissions again."""

from __future__ import annotations

import pickle
from dataclasses import replace

import pytest

from scheduling.engine import estimate
from scheduling.engine.cycle import run_cycle
from scheduling.engine.dryrun import WAITS, DryRun
from scheduling.engine.model import Policy, Workload
from scheduling.engine.runtimes import runtime_from_history

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


def test_ends_further_apart_than_the_resolution_of_the_time_ahead_are_separate_steps():
    # +10000: n1 alone is free; the gang needs both nodes, so "single" starts on n1 and holds it until
    # +12000. Three resolutions of the time ahead later (estimate.RESOLUTION of 10000 s, three times):
    # n2 is free, n1 is not. +12000: the gang starts. (Taking ends 5 % apart together, as the forecast
    # once did, started the gang at +10000.) Without reservations: with one, "single" (2000 s, past the
    # gang's shadow time) may not take n1 (test_reservations).
    second = 10_000 + 3 * estimate.RESOLUTION * 10_000
    assert second < 12_000
    plan = run_cycle(snapshot(NODES, QUEUE, [lq("a", "q")], _far_ends(second)), Policy(reserved_jobs=0), NOW)
    assert pending_info(plan, "single").estimated_start == NOW + 10_000
    assert pending_info(plan, "gang").estimated_start == NOW + 12_000


def test_ends_within_the_resolution_of_the_time_ahead_are_taken_together():
    # +10000 and half a resolution later (estimate.RESOLUTION of 10000 s ahead, halved): one step at
    # +10000 with both nodes free; the gang, first in order, starts then and ends at +10600, when
    # "single" starts.
    second = 10_000 + estimate.RESOLUTION * 10_000 / 2
    assert second - 10_000 > estimate.COALESCE_S  # the resolution decides, not the 1 s floor
    plan = run_cycle(snapshot(NODES, QUEUE, [lq("a", "q")], _far_ends(second)), Policy(), NOW)
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


def test_a_running_jobs_runtime_given_how_long_it_ran_sets_its_end_and_expected_copies_run_the_plain_one():
    # r2 (started 600 s ago) has run long enough that its runtime given that is P50 3000, P90 3300
    # (Snapshot.running_runtimes): n2 frees at +2400 (P50) and +2700 (P90), not at its plain +1400.
    # r2 was submitted 1800 s ago, within the period: its like is expected at +1800 and runs r2's plain
    # runtime (2000 s, P90 2600) on n1 (free from +1000; the gang needs both nodes): until +3800 (P90
    # +4400), when the gang starts.
    submitted = job("r2", "a", gpu=8, runtime_s=3600, created=NOW - 1800)
    snap = snapshot(
        NODES,
        QUEUE,
        [lq("a", "q")],
        [*BUSY, GANG],
        runtimes=(("r2", 2000.0, 2600.0),),
        running_runtimes=(("r2", 3000.0, 3300.0),),
        recent=(submitted,),
    )
    policy = Policy(arrival_period_s=3600, arrival_upper_p90=False)  # the P90 run expects the same
    info = pending_info(run_cycle(snap, policy, NOW), "gang")
    assert (info.estimated_start, info.estimated_start_p90) == (NOW + 3800, NOW + 4400)
    alone = replace(snap, recent=())
    info = pending_info(run_cycle(alone, policy, NOW), "gang")
    assert (info.estimated_start, info.estimated_start_p90) == (NOW + 2400, NOW + 2700)


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


FIVE_RUNS = [(3600, 1000), (3600, 2000), (3600, 3000), (3600, 4000), (3600, 5000)]


@pytest.mark.parametrize(
    ("elapsed", "history", "expected"),
    [
        # Not started, or not yet past the shortest run: the plain P50 and P90 (3000, 4000 + 0.6 * 1000).
        (0, FIVE_RUNS, (3000, 4600)),
        (800, FIVE_RUNS, (3000, 4600)),
        # 2500 s run: halfway between the 2nd and 3rd of five runs, F = 1.5 / 4 = 0.375 of them done.
        # P50 given that: F = 0.375 + 0.5 * 0.625 = 0.6875, 2.75 of 4 steps: 3750. P90: 0.375 + 0.9 *
        # 0.625 = 0.9375, 3.75 steps: 4750.
        (2500, FIVE_RUNS, (3750, 4750)),
        # Longer than every run: the plain figures (the forecast's rule for an overrun applies).
        (6000, FIVE_RUNS, (3000, 4600)),
        # By the team's ratios (none of the same request): runs of 0.5, 1 and 1.5 times 1800 s make a
        # 3600 s request's runs 1800, 3600, 5400; 2700 s run is F = 0.25: P50 at F 0.625 (1.25 steps:
        # 3600 + 0.25 * 1800 = 4050), P90 at F 0.925 (1.85 steps: 3600 + 0.85 * 1800 = 5130).
        (2700, [(1800, 900), (1800, 1800), (1800, 2700)], (4050, 5130)),
    ],
)
def test_runtime_from_history_given_how_long_the_job_has_run(elapsed, history, expected):
    p50, p90 = runtime_from_history(3600, history, elapsed_s=elapsed)
    assert p50 == pytest.approx(expected[0])
    assert p90 == pytest.approx(expected[1])


THREE_RUNS = [(3600, 1000), (3600, 2000), (3600, 3000)]


@pytest.mark.parametrize(
    ("going", "expected"),
    [
        # None going: the plain P50 and P90 of three runs (2000, 2000 + 0.8 * 1000).
        ([], (2000, 2800)),
        # Two going for 2500 and 2600 s (Kaplan-Meier): five at risk, 1000 and 2000 take 1/5 each, the
        # two going leave, 3000 takes the 3/5 left. Mass midpoints 0.1, 0.3, 0.7, scaled: 0, 1/3, 1.
        # P50 at 0.5: 2000 + (1/6) / (2/3) * 1000 = 2250; P90 at 0.9: 2000 + 0.85 * 1000 = 2850.
        ([(3600, 2500), (3600, 2600)], (2250, 2850)),
        # One going for 3500 s, past every end: 1/4 each to the three ends, the 1/4 left to it as if it
        # ended now. Four equal masses: P50 2500, P90 3000 + 0.7 * 500 = 3350.
        ([(3600, 3500)], (2500, 3350)),
        # Runs going of another request do not count (this request has runs of its own).
        ([(7200, 6000)], (2000, 2800)),
    ],
)
def test_runs_still_going_count_as_lasting_at_least_as_long_as_they_ran(going, expected):
    p50, p90 = runtime_from_history(3600, THREE_RUNS, running=going)
    assert p50 == pytest.approx(expected[0])
    assert p90 == pytest.approx(expected[1])


def test_the_p90_run_expects_the_p90_count_of_a_queues_submissions():
    # Team b submitted one 8-GPU job 3000 s ago (runs 1000 s): its like is expected at +600. Its P90
    # count next period after 1 in the last (runtimes.upper_count: 1.5 + 1.2816 * sqrt(3) = 3.72) makes
    # the P90 run expect floor(3.72) = 3 of them, 3600 / 3.72 = 967.7 s apart: +600, +1567.7, +2535.4.
    # n1 frees at +1000 (r1); team a holds n2 (r2), so b (no usage) comes first in the fair-share order.
    # P50: b's job runs +1000..+2000, then "wait" (team a) starts at +2000. P90: b's three run +1000,
    # +2000, +3000 (each arrived before the node freed), "wait" starts at +4000.
    queues = [cq("qa", {"A100-80GB": 8}, cohort="c"), cq("qb", {"A100-80GB": 8}, cohort="c")]
    busy = [
        running("r1", "a", [("n1", tuple(range(8)))], started=NOW - 200, runtime=1200),
        running("r2", "a", [("n2", tuple(range(8)))], started=NOW, runtime=100_000),
    ]
    waiting = job("wait", "a", gpu=8, runtime_s=500, created=NOW - 100)
    like = job("x", "b", gpu=8, runtime_s=3600, created=NOW - 3000)
    runtimes = (("x", 1000.0, 1000.0), ("r1", 1200.0, 1200.0), ("wait", 500.0, 500.0), ("r2", 1e5, 1e5))
    snap = snapshot(NODES, queues, [lq("a", "qa"), lq("b", "qb")], [*busy, waiting], runtimes=runtimes, recent=(like,))
    info = pending_info(run_cycle(snap, Policy(arrival_period_s=3600, arrival_upper_p90=True), NOW), "wait")
    assert (info.estimated_start, info.estimated_start_p90) == (NOW + 2000, NOW + 4000)
    same = pending_info(run_cycle(snap, Policy(arrival_period_s=3600, arrival_upper_p90=False), NOW), "wait")
    assert (same.estimated_start, same.estimated_start_p90) == (NOW + 2000, NOW + 2000)


def test_a_dry_run_expects_the_same_submissions_at_every_check_and_after_pickling():
    # The dry run runs the forecast again per check (a job submitted since decided first); the
    # expected submissions are made once per state and reused. By hand (no reservations): "l" (8 GPUs,
    # 100 s, submitted since) takes n1 at +1000 and frees it at +1100; the like of "last" is expected
    # at +1800 and holds n1 until +4300; n2 frees at +3000; the gang needs both: +4300.
    last = job("last", "a", gpu=8, runtime_s=3600, created=NOW - 1800)
    snap = snapshot(NODES, QUEUE, [lq("a", "q")], BUSY, runtimes=(("last", 2500.0, 2500.0),), recent=(last,))
    later = [(job("l", "a", gpu=8, runtime_s=100, created=NOW + 1), None)]
    candidate = replace(GANG, created_at=NOW + 2)
    dry = DryRun(snap, Policy(arrival_period_s=3600, reserved_jobs=0), NOW)
    answers = [dry.check(candidate, later=later) for _ in range(3)]
    answers.append(pickle.loads(pickle.dumps(dry)).check(candidate, later=later))
    for check in answers:
        assert check.verdict == WAITS
        assert check.estimated_start_p50 == NOW + 4300
    # Without the expected submission the gang starts when n2 frees (+3000).
    alone = DryRun(replace(snap, recent=()), Policy(arrival_period_s=3600, reserved_jobs=0), NOW)
    assert alone.check(candidate, later=later).estimated_start_p50 == NOW + 3000
