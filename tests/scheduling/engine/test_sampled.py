"""Estimated starts over sampled forward runs (scheduling.engine.sampled): quantiles of starts whose
distribution follows by hand from the running jobs' log-normal ends."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from scheduling.engine.cycle import run_cycle
from scheduling.engine.model import Policy
from scheduling.engine.sampled import lognormal, quantile_rank

from .builders import cq, job, lq, node, pending_info, running, snapshot

NOW = 1000.0
QUEUE = [cq("q", {"A100-80GB": 64})]
SAMPLES = 801
Z = NormalDist().inv_cdf


def _two_running(*pending, p90=200.0):  # type: ignore[no-untyped-def]
    """One 2-GPU node, each GPU held by a job started now whose runtime has P50 100 s and P90 ``p90``."""
    return snapshot(
        [node("n1", gpus=2)],
        QUEUE,
        [lq("a", "q")],
        [
            running("r0", "a", [("n1", (0,))], started=NOW, runtime=3600),
            running("r1", "a", [("n1", (1,))], started=NOW, runtime=3600),
            *pending,
        ],
        runtimes=(("r0", 100.0, p90), ("r1", 100.0, p90)),
    )


def _log_normal_quantile(q: float) -> float:
    """The q quantile of the log-normal with median 100 and P90 200, by hand."""
    sigma = math.log(2.0) / Z(0.9)
    return 100.0 * math.exp(sigma * Z(q))


@pytest.mark.parametrize(
    ("gpus", "cdf_of_one"),
    [
        # Two GPUs: the job starts when the later of two independent ends comes, P(max <= x) = F(x)^2.
        (2, lambda q: math.sqrt(q)),
        # One GPU: when the earlier comes, P(min <= x) = 1 - (1 - F(x))^2.
        (1, lambda q: 1.0 - math.sqrt(1.0 - q)),
    ],
    ids=["waits for both ends", "waits for the first end"],
)
def test_sampled_quantiles_of_a_start_are_those_of_the_ends_it_waits_for(gpus, cdf_of_one):
    snap = _two_running(job("j", "a", gpu=gpus, runtime_s=60))
    info = pending_info(run_cycle(snap, Policy(forecast_samples=SAMPLES, preemption=False), NOW), "j")
    for told, q in ((info.estimated_start, 0.5), (info.estimated_start_p90, 0.9)):
        expected = NOW + _log_normal_quantile(cdf_of_one(q))
        # Sampling error of a quantile of 801 draws: well within 10 % of the wait here.
        assert told == pytest.approx(expected, rel=0, abs=0.1 * (expected - NOW))


def test_the_sampled_median_of_a_gang_start_is_later_than_the_point_forecast():
    # The point forecast ends both jobs at their P50 (+100); the later of two ends is past +100 three
    # times in four (1 - 0.5^2), so the median start is later (+134 by hand).
    snap = _two_running(job("j", "a", gpu=2, runtime_s=60))
    point = pending_info(run_cycle(snap, Policy(preemption=False), NOW), "j")
    sampled = pending_info(run_cycle(snap, Policy(forecast_samples=SAMPLES, preemption=False), NOW), "j")
    assert point.estimated_start == NOW + 100
    assert sampled.estimated_start > NOW + 120


def test_without_spread_or_submissions_every_sample_is_the_point_forecast():
    # Runtimes without spread (P50 = P90) and no recent submissions: nothing is drawn, every world is
    # the point forecast's, so its quantiles are the point forecast's starts.
    snap = _two_running(
        job("first", "a", gpu=2, runtime_s=300, created=1), job("second", "a", gpu=1, created=2), p90=100
    )
    point = run_cycle(snap, Policy(), NOW)
    sampled = run_cycle(snap, Policy(forecast_samples=5), NOW)
    assert [(p.workload_id, p.estimated_start, p.estimated_start_p90) for p in sampled.pending] == [
        (p.workload_id, p.estimated_start, p.estimated_start_p90) for p in point.pending
    ]
    assert {p.workload_id: p.estimated_start for p in point.pending} == {"first": NOW + 100, "second": NOW + 400}


def test_the_same_cycle_gives_the_same_sampled_estimates():
    snap = _two_running(job("j", "a", gpu=2, runtime_s=60))
    policy = Policy(forecast_samples=9, preemption=False)
    assert run_cycle(snap, policy, NOW).pending == run_cycle(snap, policy, NOW).pending


def test_log_normal_draws_have_the_asked_median_and_p90():
    draws = lognormal(np.random.default_rng(7), np.full(20_000, 50.0), np.full(20_000, 80.0))
    assert np.median(draws) == pytest.approx(50.0, rel=0.02)
    assert np.percentile(draws, 90) == pytest.approx(80.0, rel=0.02)
    fixed = lognormal(np.random.default_rng(7), np.array([30.0, 40.0]), np.array([30.0, 10.0]))
    assert fixed.tolist() == [30.0, 40.0]  # no spread (P90 at or below P50): the P50 itself


@pytest.mark.parametrize(("count", "q", "rank"), [(1, 0.5, 0), (8, 0.5, 3), (9, 0.5, 4), (10, 0.9, 8), (16, 0.9, 14)])
def test_quantile_rank_is_the_nearest_rank(count, q, rank):
    # Nearest rank: the least value with at least a q share of the values at or below it (1-based ceil(q n)).
    assert quantile_rank(count, q) == rank
