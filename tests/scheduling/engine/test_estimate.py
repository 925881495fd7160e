"""Estimated start times (scheduling.engine.estimate): the cycle run forward over its final state, with
running jobs ending at their expected end, the queue's order, gangs, fragmentation and quota."""

from __future__ import annotations

import pytest

from scheduling.engine.cycle import run_cycle
from scheduling.engine.model import Policy, ReasonKind, ReplicaPlacement, Resources, Workload, WorkloadState

from .builders import cq, job, lq, node, pending_info, running, snapshot

NOW = 1000.0
QUEUE = [cq("q", {"A100-80GB": 64})]


def test_estimated_start_follows_running_jobs_and_a_small_job_starts_in_the_gap_as_the_cycle_lets_it():
    # One 2-GPU node: r0 ends at 1000+100, r1 at 1000+500. Pending: first (2 GPUs, 300 s), second (1 GPU,
    # 60 s). At +100 one GPU is free: first does not fit, and the cycle admits second there (no strict
    # FIFO), which ends at +160, before first can start at +500.
    snap = snapshot(
        [node("n1", gpus=2)],
        QUEUE,
        [lq("a", "q")],
        [
            running("r0", "a", [("n1", (0,))], started=NOW - 3500, runtime=3600),
            running("r1", "a", [("n1", (1,))], started=NOW - 3100, runtime=3600),
            job("first", "a", gpu=2, runtime_s=300, created=1),
            job("second", "a", gpu=1, runtime_s=60, created=2),
        ],
    )
    plan = run_cycle(snap, Policy(), NOW)
    first = pending_info(plan, "first")
    second = pending_info(plan, "second")
    assert first.estimated_start == NOW + 500
    assert second.estimated_start == NOW + 100
    assert (first.position, second.position) == (1, 2)


def test_a_job_ending_on_a_cordoned_node_does_not_bring_the_estimated_start_forward():
    # n1 is full until +9000; the job on cordoned n2 ends at +100, but nothing can start on n2.
    snap = snapshot(
        [node("n1", gpus=8), node("n2", gpus=8, cordoned=True)],
        QUEUE,
        [lq("a", "q")],
        [
            running("long", "a", [("n1", tuple(range(8)))], started=NOW, runtime=9000),
            running("short", "a", [("n2", tuple(range(8)))], started=NOW, runtime=100),
            job("j", "a", gpu=8, runtime_s=10),
        ],
    )
    assert pending_info(run_cycle(snap, Policy(), NOW), "j").estimated_start == NOW + 9000


@pytest.mark.parametrize("request_kwargs", [{"gpu": 8}, {"mig": "7g.80gb"}], ids=["whole GPUs", "MIG slice"])
def test_mig_and_plain_nodes_of_one_model_are_separate_pools_for_estimated_starts(request_kwargs):
    # Both nodes are full until +9000: neither kind of request may count the other node's GPUs as free.
    mig_jobs = [
        Workload(
            id=f"m{d}",
            local_queue="a",
            team="a",
            priority=0,
            created_at=NOW,
            resources=Resources(mig_profile="7g.80gb"),
            state=WorkloadState.RUNNING,
            gpu_model="A100-80GB",
            placements=(ReplicaPlacement("m1", gpu_indices=(d,), mig_profile="7g.80gb", mig_slot=0),),
            started_at=NOW,
            runtime_s=9000,
        )
        for d in range(8)
    ]
    snap = snapshot(
        [node("n1", gpus=8), node("m1", gpus=8, mig=True)],
        QUEUE,
        [lq("a", "q")],
        [
            running("busy", "a", [("n1", tuple(range(8)))], started=NOW, runtime=9000),
            *mig_jobs,
            job("j", "a", runtime_s=10, **request_kwargs),
        ],
    )
    assert pending_info(run_cycle(snap, Policy(), NOW), "j").estimated_start == NOW + 9000


def test_a_job_larger_than_the_cluster_has_no_estimated_start():
    snap = snapshot([node("n1", gpus=2)], QUEUE, [lq("a", "q")], [job("huge", "a", gpu=4)])
    info = pending_info(run_cycle(snap, Policy(), NOW), "huge")
    assert info.estimated_start is None


def test_quota_bound_jobs_wait_for_their_queue_to_drain():
    snap = snapshot(
        [node("n1", gpus=8)],
        [cq("q", {"A100-80GB": 2})],
        [lq("a", "q")],
        [
            running("r", "a", [("n1", (0, 1))], started=NOW, runtime=1000),
            job("j", "a", gpu=2, runtime_s=10),
        ],
    )
    info = pending_info(run_cycle(snap, Policy(), NOW), "j")
    assert info.reason.kind == ReasonKind.QUOTA
    assert info.estimated_start == NOW + 1000


def test_a_replica_larger_than_any_node_has_no_estimated_start():
    snap = snapshot([node("n1", gpus=4), node("n2", gpus=4)], QUEUE, [lq("a", "q")], [job("wide", "a", gpu=8)])
    info = pending_info(run_cycle(snap, Policy(), NOW), "wide")
    assert info.reason.message == (
        "placement: never fits as configured: one replica needs 8 A100-80GB GPUs and the largest A100-80GB node has 4"
    )
    assert info.estimated_start is None


def test_a_job_that_runs_until_stopped_never_gives_its_room_back_in_the_forecast():
    # n1: an inference replica (runs until stopped) whose requested runtime would end it at +100; n2: a
    # batch job that ends at +500. "needs-n1" wants two 8-GPU nodes (so it needs n1 too): it has no
    # estimate, whatever the replica's runtime_s says. "fits-n2" (one node) starts when n2 frees, at +500.
    snap = snapshot(
        [node("n1", gpus=8), node("n2", gpus=8)],
        QUEUE,
        [lq("a", "q")],
        [
            running(
                "serve", "a", [("n1", tuple(range(8)))], started=NOW, runtime=100, kind="inference", until_stopped=True
            ),
            running("batch", "a", [("n2", tuple(range(8)))], started=NOW, runtime=500),
            job("needs-n1", "a", gpu=8, replicas=2, runtime_s=60, created=1),
            job("fits-n2", "a", gpu=8, runtime_s=60, created=2),
        ],
    )
    plan = run_cycle(snap, Policy(), NOW)
    assert pending_info(plan, "needs-n1").estimated_start is None
    assert pending_info(plan, "fits-n2").estimated_start == NOW + 500


def test_a_waiting_job_that_runs_until_stopped_holds_its_room_for_good_once_the_forecast_starts_it():
    # One 8-GPU node, busy until +100. First in line: an inference replica (8 GPUs, until stopped); then a
    # batch job of 8 GPUs. The replica starts at +100 and never ends, so the batch job gets no estimate
    # (with a 60 s runtime_s read as its end it would have been told +160).
    snap = snapshot(
        [node("n1", gpus=8)],
        QUEUE,
        [lq("a", "q")],
        [
            running("busy", "a", [("n1", tuple(range(8)))], started=NOW, runtime=100),
            job("replica", "a", gpu=8, runtime_s=60, created=1, kind="inference", until_stopped=True),
            job("after", "a", gpu=8, runtime_s=60, created=2),
        ],
    )
    plan = run_cycle(snap, Policy(), NOW)
    assert pending_info(plan, "replica").estimated_start == NOW + 100
    assert pending_info(plan, "after").estimated_start is None
