"""Order: priority, then weighted dominant resource share (LocalQueues in a ClusterQueue, ClusterQueues
in a cohort), then submission time."""

from __future__ import annotations

from scheduling.engine.admission import pending_limit_error
from scheduling.engine.cycle import run_cycle
from scheduling.engine.model import LocalQueue, Policy

from .builders import admitted_ids, cq, job, lq, node, running, snapshot

NOW = 1000.0


def test_local_queues_alternate_by_dominant_share():
    # 4 free GPUs; team a submitted first and more, but b is under its share once a has one running.
    snap = snapshot(
        [node("n1", gpus=4)],
        [cq("q", {"A100-80GB": 8})],
        [lq("a", "q"), lq("b", "q")],
        [job(f"a{i}", "a", gpu=1, created=i) for i in range(4)]
        + [job(f"b{i}", "b", gpu=1, created=10 + i) for i in range(4)],
    )
    plan = run_cycle(snap, Policy(), NOW)
    assert admitted_ids(plan) == ["a0", "a1", "b0", "b1"]


def test_a_queue_already_using_more_waits_behind_the_other():
    snap = snapshot(
        [node("n1", gpus=4), node("n2", gpus=4)],
        [cq("q", {"A100-80GB": 8})],
        [lq("heavy", "q"), lq("light", "q")],
        [
            running("r", "heavy", [("n1", (0, 1, 2, 3))]),
            job("heavy-old", "heavy", gpu=2, created=0),
            job("light-new", "light", gpu=2, created=50),
            job("light-newer", "light", gpu=2, created=60),
        ],
    )
    plan = run_cycle(snap, Policy(), NOW)
    assert admitted_ids(plan) == ["light-new", "light-newer"]


def test_weights_scale_the_share():
    snap = snapshot(
        [node("n1", gpus=6)],
        [cq("q", {"A100-80GB": 12})],
        [lq("big", "q", weight=2.0), lq("small", "q", weight=1.0)],
        [job(f"big{i}", "big", gpu=1, created=i) for i in range(6)]
        + [job(f"small{i}", "small", gpu=1, created=i + 0.5) for i in range(6)],
    )
    plan = run_cycle(snap, Policy(), NOW)
    ids = admitted_ids(plan)
    assert sum(i.startswith("big") for i in ids) == 4
    assert sum(i.startswith("small") for i in ids) == 2


def test_cluster_queues_in_a_cohort_share_by_weight():
    snap = snapshot(
        [node("n1", gpus=4)],
        [
            cq("qa", {"A100-80GB": 4}, cohort="co"),
            cq("qb", {"A100-80GB": 4}, cohort="co"),
        ],
        [lq("a", "qa"), lq("b", "qb")],
        [job(f"a{i}", "a", gpu=1, created=i) for i in range(4)]
        + [job(f"b{i}", "b", gpu=1, created=10 + i) for i in range(4)],
    )
    plan = run_cycle(snap, Policy(), NOW)
    assert admitted_ids(plan) == ["a0", "a1", "b0", "b1"]


def test_priority_beats_fair_share():
    snap = snapshot(
        [node("n1", gpus=2)],
        [cq("q", {"A100-80GB": 8})],
        [lq("a", "q"), lq("b", "q")],
        [
            job("a0", "a", gpu=1, created=0),
            job("a1", "a", gpu=1, created=1, priority=5),
            job("b0", "b", gpu=1, created=2),
        ],
    )
    plan = run_cycle(snap, Policy(), NOW)
    assert admitted_ids(plan) == ["a1", "b0"]


def test_pending_limit_error_says_what_to_do():
    queue = LocalQueue("vision", "vision", "q", max_pending=3)
    assert pending_limit_error(queue, 2) is None
    message = pending_limit_error(queue, 3)
    assert message is not None
    assert "3 pending jobs, its limit is 3" in message
    assert pending_limit_error(LocalQueue("x", "x", "q"), 10_000) is None
