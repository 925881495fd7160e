"""Reasons with numbers, queue positions, the budget stop and invalid requests (estimated starts:
test_estimate.py)."""

from __future__ import annotations

import pytest

from scheduling.engine.cycle import run_cycle
from scheduling.engine.model import Policy, ReasonKind

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
        "placement: 0 of 6 nodes fit: 3 too few free GPUs, 2 GPU model not A100-80GB, 1 not enough memory; "
        "needs 1 free A100-80GB GPU on one node; eligible nodes have at most 0 free each and 0 in all "
        "(capacity in use)"
    )
    assert info.reason.waits
    assert dict(info.reason.details)["too few free GPUs"] == 3


@pytest.mark.parametrize(
    ("request_kwargs", "message"),
    [
        (
            {"milli": 600},
            (
                "placement: 0 of 1 nodes fit: 1 no GPU with 0.6 free; needs 0.6 of one A100-80GB GPU; eligible nodes' "
                "GPUs have at most 0.5 free each and 0.5 in all (capacity in use)"
            ),
        ),
        (
            {"gpu": 1},
            (
                "placement: 0 of 1 nodes fit: 1 too few free GPUs; needs 1 free A100-80GB GPU on one node; eligible "
                "nodes have at most 0 free each and 0.5 in all (capacity in use)"
            ),
        ),
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
    # Two 4g instances need 8 compute slices of 7: the second waits for the first (not fragmentation).
    assert reason_of(run_cycle(snap, Policy(), NOW), "j") == (
        "placement: 0 of 1 nodes fit: 1 no free MIG slice for 4g.40gb; needs a free 4g.40gb slice; no GPU of an "
        "eligible node has one at a valid start (capacity in use)"
    )


def test_cpu_only_jobs_are_explained_by_their_own_filters():
    snap = snapshot(
        [node("c1", None, labels={"disk": "hdd"}), node("c2", None, cpu=1000)],
        QUEUE,
        [lq("a", "q")],
        [
            running("r", "a", [("c1", ())], mem=510_000),
            job("j", "a", cpu=2000, node_selector=(("disk", "hdd"),), mem=4096),
            job("huge", "a", cpu=2000, node_selector=(("disk", "hdd"),), mem=10**9, created=1),
        ],
    )
    plan = run_cycle(snap, Policy(), NOW)
    assert reason_of(plan, "j") == (
        "placement: 0 of 2 nodes fit: 1 node selector does not match, 1 not enough memory; needs 4 GiB free memory "
        "on one node; eligible nodes have at most 1.953 GiB free each and 1.953 GiB in all (capacity in use)"
    )
    assert reason_of(plan, "huge") == (
        "placement: never fits as configured: one replica needs 976562.5 GiB memory and the largest node has 500"
    )
