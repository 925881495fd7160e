"""Replay mode: queueing by priority then FIFO, releases at the end of each pod's run."""

from __future__ import annotations

import numpy as np
import pytest

from scheduling.sim.arrival import typical_of
from scheduling.sim.replay import run_replay
from scheduling.sim.trace import TraceNode, TracePod, node_arrays

ONE_GPU = [TraceNode("n0", 16000, 65536, 1, "T4")]


def pod(name: str, created: float, deleted: float, qos: str = "LS") -> TracePod:
    return TracePod(name, 1000, 1024, 1, 1000, (), qos, created, deleted)


def test_a_pod_waits_until_the_gpu_is_released_and_keeps_its_run_time():
    pods = [pod("a", 0, 100), pod("b", 10, 60)]
    run = run_replay(node_arrays(ONE_GPU), pods, "fgd", seed=1, typical=typical_of(pods))
    assert run.started_s.tolist() == [0, 100]
    assert run.ended_s.tolist() == [100, 150]
    assert run.wait_s.tolist() == [0, 90]
    assert run.delay_percentiles()["max"] == pytest.approx(90)
    assert run.allocated_milli.max() == 1000  # never more than the one GPU


def test_the_queue_serves_priority_first_then_fifo():
    pods = [pod("a", 0, 100), pod("be", 5, 15, "BE"), pod("ls-late", 8, 18, "LS"), pod("ls", 6, 16, "LS")]
    run = run_replay(node_arrays(ONE_GPU), pods, "bestfit", seed=1, typical=typical_of(pods))
    order = np.argsort(run.started_s)
    assert [pods[i].name for i in order] == ["a", "ls", "ls-late", "be"]


def test_a_pod_that_never_fits_stays_queued():
    pods = [TracePod("huge", 1000, 1024, 8, 1000, (), "LS", 0, 10), pod("ok", 1, 2)]
    run = run_replay(node_arrays(ONE_GPU), pods, "random", seed=3, typical=typical_of(pods))
    assert np.isnan(run.started_s[0])
    assert run.delay_percentiles()["never_started"] == 1
    assert run.started_s[1] == 1


def test_compress_divides_arrival_times_only():
    pods = [pod("a", 0, 100), pod("b", 200, 300)]
    run = run_replay(node_arrays(ONE_GPU), pods, "fgd", seed=1, typical=typical_of(pods), compress=4)
    assert run.started_s.tolist() == [0, 100]  # b arrives at 50, waits for a
    assert run.ended_s.tolist() == [100, 200]


def test_mean_allocation_is_time_weighted_over_the_arrival_window():
    from scheduling.sim.cli import _window_mean

    times = np.array([0.0, 10.0, 20.0, 1000.0])
    values = np.array([100.0, 50.0, 0.0, 0.0])
    assert _window_mean(times, values, np.array([0.0, 20.0])) == pytest.approx(75.0)
