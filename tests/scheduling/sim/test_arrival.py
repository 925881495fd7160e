"""The paper's arrival protocol: inflation, the arrival-% curve, determinism."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.sim.arrival import inflate, run_arrival, typical_of, unallocated_curve
from scheduling.sim.trace import TracePod, node_arrays
from tests.scheduling.sim.conftest import make_nodes, make_pods

pods_strategy = st.lists(
    st.builds(
        lambda i, num, milli: TracePod(f"p{i}", 1000, 1024, num, milli if num else 0),
        st.integers(0, 10_000),
        st.sampled_from((0, 1, 1, 2, 8)),
        st.sampled_from((100, 500, 1000)),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=40, deadline=None)
@given(pods=pods_strategy, capacity=st.integers(1000, 40_000), seed=st.integers(0, 2**16))
def test_resampling_stops_before_the_request_would_pass_the_ratio(pods, capacity, seed):
    arrivals = inflate(pods, capacity, seed=seed, ratio=1.3)
    originals = arrivals[: len(pods)]
    assert sorted(id(a.pod) for a in originals) == sorted(id(p) for p in pods)  # a shuffle of all pods
    assert [a.seq for a in arrivals] == list(range(len(arrivals)))
    total = sum(a.pod.total_gpu_milli for a in arrivals)
    extra = arrivals[len(pods) :]
    if extra:
        assert total <= 1.3 * capacity
        assert all(a.name.startswith(a.pod.name + "-tuned-") for a in extra)
        assert [a.name.rsplit("-", 1)[1] for a in extra] == [str(i) for i in range(len(extra))]
    # Whatever was drawn next would have passed the target (re-drawing with the same generator).
    rng = np.random.default_rng(seed)
    rng.permutation(len(pods))
    if sum(p.total_gpu_milli for p in pods) < 1.3 * capacity and any(p.total_gpu_milli for p in pods):
        for _ in extra:
            rng.integers(len(pods))
        nxt = pods[int(rng.integers(len(pods)))]
        assert total + nxt.total_gpu_milli > 1.3 * capacity


def test_the_curve_averages_allocation_over_pods_whose_arrival_rounds_to_x():
    arrived = np.array([99.4, 99.6, 100.2, 100.49, 100.5, 101.0])
    allocated = np.array([90.0, 91.0, 92.0, 93.0, 94.0, 95.0])
    curve = unallocated_curve(arrived, allocated)
    assert curve[99] == pytest.approx(100 - 90.0)
    assert curve[100] == pytest.approx(100 - (91 + 92 + 93) / 3)
    assert curve[101] == pytest.approx(100 - (94 + 95) / 2)
    assert np.isnan(curve[50])
    assert len(curve) == 131


def test_a_run_is_deterministic_by_seed_and_differs_across_seeds():
    nodes = node_arrays(make_nodes(10, seed=3))
    pods = make_pods(150, seed=3)
    typical = typical_of(pods)
    runs = [
        run_arrival(nodes, inflate(pods, nodes.total_gpu_milli(), seed=s), "fgd", seed=s, typical=typical)
        for s in (7, 7, 8)
    ]
    assert [a.name for a in runs[0].arrivals] == [a.name for a in runs[1].arrivals]
    assert (runs[0].node == runs[1].node).all()
    assert runs[0].gpu_indices == runs[1].gpu_indices
    assert [a.name for a in runs[0].arrivals] != [a.name for a in runs[2].arrivals]


def test_recorded_totals_follow_the_placements():
    nodes = node_arrays(make_nodes(6, seed=5))
    pods = make_pods(100, seed=5)
    arrivals = inflate(pods, nodes.total_gpu_milli(), seed=1)
    run = run_arrival(nodes, arrivals, "bestfit", seed=1, typical=typical_of(pods))
    requests = np.array([a.pod.total_gpu_milli for a in arrivals])
    assert (run.arrived_milli == np.cumsum(requests)).all()
    assert (run.allocated_milli == np.cumsum(np.where(run.node >= 0, requests, 0))).all()
    assert run.arrived_milli[-1] > nodes.total_gpu_milli()  # inflated past 100 %
    assert run.allocated_milli[-1] <= nodes.total_gpu_milli()
    assert (run.frag_milli >= 0).all()
