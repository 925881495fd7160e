"""Queue standings against hand-built states, every expected figure worked out from the rule by hand."""

from __future__ import annotations

import pytest

from scheduling.engine.admission import dominant_resource, weighted_dominant_share
from scheduling.engine.model import ReplicaPlacement, Resources, Workload, WorkloadState
from scheduling.engine.standing import queue_standings
from tests.scheduling.engine.builders import cq, job, lq, node, running, snapshot

A100 = "gpu/A100-80GB"


def _row(standings, queue: str, key: str):
    q = next(q for q in (*standings.cluster_queues, *standings.cohorts) if q.name == queue)
    return next(r for r in q.resources if r.key == key)


def test_the_weighted_dominant_share_is_the_largest_share_of_a_pool_over_the_weight():
    usage = {"gpu/A100-80GB": 3000, "cpu": 8000}
    pool = {"gpu/A100-80GB": 8000}  # no CPU quota: CPU is measured against the cluster's 64 cores
    capacity = {"cpu": 64000, "gpu/A100-80GB": 16000}
    # A100: 3/8 = 0.375; CPU: 8/64 = 0.125 -> 0.375, weight 2 -> 0.1875.
    assert weighted_dominant_share(usage, pool, capacity, 2.0) == pytest.approx(0.1875)
    assert dominant_resource(usage, pool, capacity) == ("gpu/A100-80GB", pytest.approx(0.375))
    assert weighted_dominant_share({}, pool, capacity, 1.0) == 0.0


def test_borrowing_shows_as_borrowed_on_the_borrower_and_lent_on_the_lender():
    # Cohort "lab": a has 4 A100, b has 4. a runs 6 whole GPUs: it borrows 2, which b lends.
    snap = snapshot(
        [node("n1"), node("n2")],
        [cq("a", {"A100-80GB": 4}, cohort="lab"), cq("b", {"A100-80GB": 4}, cohort="lab")],
        [lq("a", "a"), lq("b", "b")],
        [running("r1", "a", [("n1", (0, 1, 2, 3, 4, 5))])],
    )
    s = queue_standings(snap)
    a, b = _row(s, "a", A100), _row(s, "b", A100)
    assert (a.nominal, a.used, a.borrowed, a.lent) == (4000, 6000, 2000, 0)
    assert (b.nominal, b.used, b.borrowed, b.lent) == (4000, 0, 0, 2000)
    cohort = _row(s, "lab", A100)
    assert (cohort.nominal, cohort.used, cohort.borrowed, cohort.lent) == (8000, 6000, 2000, 2000)
    # The cohort's pool is 8 A100: a's share 6/8, b's 0.
    share = {q.name: q.share for q in s.cluster_queues}
    assert share == {"a": pytest.approx(0.75), "b": 0.0}


def test_lending_is_split_over_the_lenders_by_their_unused_lendable_quota():
    # c borrows 3; a leaves 4 unused, b leaves 2 unused but may lend only 1: split 4 : 1 of 3.
    snap = snapshot(
        [node("n1"), node("n2")],
        [
            cq("a", {"A100-80GB": 4}, cohort="lab"),
            cq("b", {"A100-80GB": (4, None, 1)}, cohort="lab"),
            cq("c", {"A100-80GB": 2}, cohort="lab"),
        ],
        [lq("a", "a"), lq("b", "b"), lq("c", "c")],
        [running("rb", "b", [("n1", (0, 1))]), running("rc", "c", [("n2", (0, 1, 2, 3, 4))])],
    )
    s = queue_standings(snap)
    assert _row(s, "c", A100).borrowed == 3000
    lent = {q: _row(s, q, A100).lent for q in ("a", "b", "c")}
    assert sum(lent.values()) == 3000
    assert lent == {"a": 2400, "b": 600, "c": 0}


def test_pending_demand_is_charged_to_the_first_gpu_model_the_job_may_use():
    snap = snapshot(
        [node("n1"), node("t1", "T4", 4)],
        [cq("a", {"T4": 2, "A100-80GB": 4})],
        [lq("a", "a")],
        [
            job("p1", "a", gpu=2, replicas=3),  # T4 first in the flavor order: 6 T4
            job("p2", "a", milli=250, allowed_gpu_models=("A100-80GB",)),  # only A100: 250 milli
            job("p3", "a", mig="3g.40gb", allowed_gpu_models=("A100-80GB",), replicas=2),  # 2 x 4/8 of a device
        ],
        gpu_memory_gib=(("A100-80GB", 80), ("T4", 16)),
    )
    s = queue_standings(snap)
    assert _row(s, "a", "gpu/T4").pending == 6000
    assert _row(s, "a", A100).pending == 250 + 2 * 500


def test_a_mig_slice_is_used_quota_by_its_memory_share_and_local_queues_rank_within_their_queue():
    mig = Workload(
        id="m",
        local_queue="x",
        team="x",
        priority=0,
        created_at=0.0,
        resources=Resources(mig_profile="1g.10gb", cpu_milli=1000, memory_mib=1024),
        state=WorkloadState.RUNNING,
        gpu_model="A100-80GB",
        placements=(ReplicaPlacement("n1", (0,), 0, "1g.10gb", 0, 1000, 1024),),
    )
    snap = snapshot(
        [node("n1", mig=True)],
        [cq("a", {"A100-80GB": 2})],
        [lq("x", "a", weight=1.0), lq("y", "a", weight=2.0)],
        [mig, running("r", "y", [("n1", (1,))])],
        gpu_memory_gib=(("A100-80GB", 80),),
    )
    s = queue_standings(snap)
    assert _row(s, "a", A100).used == 125 + 1000  # 1 of 8 memory slices, plus a whole GPU
    local = {q.name: q for q in s.local_queues}
    assert local["x"].share == pytest.approx(125 / 2000)  # over the ClusterQueue's 2 GPUs, weight 1
    assert local["y"].share == pytest.approx(1000 / 2000 / 2)  # weight 2
    assert local["y"].dominant == A100
