"""Reasons with numbers, queue positions, the budget stop, invalid requests and estimated starts."""

from __future__ import annotations

import pytest

from scheduling.engine.cycle import run_cycle
from scheduling.engine.model import Policy, ReasonKind, ReplicaPlacement, Resources, Workload, WorkloadState

from .builders import admitted_ids, cq, job, lq, node, pending_info, reason_of, running, snapshot

NOW = 1000.0
QUEUE = [cq("q", {"A100-80GB": 64})]


def test_a_blocked_team_may_not_start_new_jobs_and_says_why():
    snap = snapshot(
        [node("n1")],
        QUEUE,
        [lq("vision", "q"), lq("nlp", "q")],
        [job("v", "vision", gpu=1), job("n", "nlp", gpu=1)],
        teams_blocked=(("vision", "monthly budget of $5,000 used up"),),
    )
    plan = run_cycle(snap, Policy(), NOW)
    assert admitted_ids(plan) == ["n"]
    info = pending_info(plan, "v")
    assert info.reason.kind == ReasonKind.BUDGET
    assert info.reason.message == "budget: team vision may not start new jobs: monthly budget of $5,000 used up"
    assert info.estimated_start is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"gpu": 1, "milli": 500},
            "invalid: ask for whole GPUs, a GPU fraction, a MIG profile or GPU memory, not several",
        ),
        ({"milli": 1500}, "invalid: gpu_milli must be between 1 and 999, got 1500"),
        ({"gpu": 1, "replicas": 2, "min_available": 3}, "invalid: replicas=2, min_available=3"),
    ],
)
def test_invalid_requests_are_explained(kwargs, message):
    snap = snapshot([node("n1")], QUEUE, [lq("a", "q")], [job("j", "a", **kwargs)])
    assert reason_of(run_cycle(snap, Policy(), NOW), "j") == message


def test_unknown_queue_is_invalid():
    snap = snapshot([node("n1")], QUEUE, [lq("a", "q")], [job("j", "nope", gpu=1)])
    assert reason_of(run_cycle(snap, Policy(), NOW), "j") == "invalid: local queue nope does not exist"


def test_placement_reason_counts_each_node_once_by_its_first_failing_filter():
    nodes = (
        [node(f"full{i}", gpus=1) for i in range(3)]
        + [node(f"h{i}", "H100-80GB", 8) for i in range(2)]
        + [node("small-mem", gpus=8, mem=1000)]
    )
    work = [running(f"r{i}", "a", [(f"full{i}", (0,))]) for i in range(3)]
    snap = snapshot(
        nodes,
        [cq("q", {"A100-80GB": 64, "H100-80GB": 0})],
        [lq("a", "q")],
        [*work, job("j", "a", gpu=1, mem=4096, allowed_gpu_models=("A100-80GB",))],
    )
    info = pending_info(run_cycle(snap, Policy(), NOW), "j")
    assert info.reason.message == (
        "placement: 0 of 6 nodes fit: 3 too few free GPUs, 2 GPU model not allowed, 1 not enough memory"
    )
    assert dict(info.reason.details)["too few free GPUs"] == 3


def test_estimated_start_follows_running_jobs_and_queue_order():
    # One 2-GPU node: r0 ends at 1000+100, r1 at 1000+500. Pending: a (2 GPUs, 300 s), b (1 GPU).
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
    assert second.estimated_start == NOW + 500 + 300
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
    assert info.reason.message == "placement: 0 of 2 nodes fit: 2 too few free GPUs"
    assert info.estimated_start is None


@pytest.mark.parametrize(
    ("request_kwargs", "message"),
    [
        ({"milli": 600}, "placement: 0 of 1 nodes fit: 1 no GPU with 0.6 free"),
        ({"gpu": 1}, "placement: 0 of 1 nodes fit: 1 too few free GPUs"),
    ],
)
def test_gpu_shortage_is_worded_for_the_request(request_kwargs, message):
    snap = snapshot(
        [node("n1", gpus=1)],
        QUEUE,
        [lq("a", "q")],
        [running("r", "a", [("n1", (0,))], gpu_milli=500), job("j", "a", **request_kwargs)],
    )
    assert reason_of(run_cycle(snap, Policy(), NOW), "j") == message


def test_mig_shortage_names_the_profile():
    snap = snapshot(
        [node("m1", gpus=1, mig=True)],
        QUEUE,
        [lq("a", "q")],
        [job("big", "a", mig="4g.40gb"), job("j", "a", mig="4g.40gb", created=1)],
    )
    assert (
        reason_of(run_cycle(snap, Policy(), NOW), "j") == "placement: 0 of 1 nodes fit: 1 no free MIG slice for 4g.40gb"
    )


def test_cpu_only_jobs_are_explained_by_their_own_filters():
    snap = snapshot(
        [node("c1", None, labels={"disk": "hdd"}), node("c2", None, cpu=1000)],
        QUEUE,
        [lq("a", "q")],
        [job("j", "a", cpu=2000, node_selector=(("disk", "hdd"),), mem=10**9)],
    )
    assert reason_of(run_cycle(snap, Policy(), NOW), "j") == (
        "placement: 0 of 2 nodes fit: 1 node selector does not match, 1 not enough memory"
    )
