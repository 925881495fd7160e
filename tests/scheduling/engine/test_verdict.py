"""``verdict.never_fits``: a job that can never run as configured is told so (``waits`` false, the limit
named with its numbers); a job that only waits for quota, capacity or fragmentation is told that.

The scenario tables are written from the rule in ``docs/engine.md`` ("Never fits as configured");
the properties compare it with the engine's own admission primitives on the empty cluster."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.engine.capacity import Cluster
from scheduling.engine.cycle import run_cycle
from scheduling.engine.model import Policy, Snapshot, Taint, Toleration, Workload, labels_of
from scheduling.engine.placement import Placer
from scheduling.engine.quota import QuotaBook, models_to_try, request_of
from scheduling.engine.verdict import never_fits

from .builders import cq, job, lq, node, pending_info, running, snapshot

NOW = 1000.0
NEVER = "never fits as configured"
A100 = ("A100-80GB",)

# Two A100 nodes of 8 GPUs (64 cores, 500 GiB) and one T4 node of 4; queue q (cohort c) holds 8 A100s
# nominal and may borrow 4 more from queue other; T4s 4 nominal, no borrowing limit.
NODES = [node("a1"), node("a2"), node("t1", "T4", 4, cpu=16_000, mem=64_000, gpu_memory_gib=16)]
QUEUES = [
    cq("q", {"A100-80GB": 8, "T4": 4}, cohort="c"),
    cq("other", {"A100-80GB": (8, None, 4), "T4": (0,)}, cohort="c"),
]


def verdict(work: Workload, nodes=None, queues=None, **kwargs: Any):
    snap = snapshot(nodes or NODES, queues or QUEUES, [lq("a", "q")], [], **kwargs)
    return never_fits(snap, work)


@pytest.mark.parametrize(
    ("work", "limit", "message"),
    [
        # The queue's ceiling: 8 nominal + 4 the cohort may lend = 12 A100s.
        (
            job("j", "a", gpu=8, replicas=2, allowed_gpu_models=A100),
            "queue_ceiling",
            (
                f"quota: {NEVER}: needs 16 A100-80GB GPUs at once and queue q may hold at most 12 "
                "(nominal 8 + 4 it may borrow in cohort c)"
            ),
        ),
        # A replica bigger than the largest node, by GPUs, CPU, memory, or all of them together.
        (
            job("j", "a", gpu=9, allowed_gpu_models=A100),
            "largest_node",
            f"placement: {NEVER}: one replica needs 9 A100-80GB GPUs and the largest A100-80GB node has 8",
        ),
        (
            job("j", "a", gpu=1, cpu=65_000, allowed_gpu_models=A100),
            "largest_node",
            f"placement: {NEVER}: one replica needs 65 CPU cores and the largest A100-80GB node has 64",
        ),
        (
            job("j", "a", gpu=1, mem=600 * 1024, allowed_gpu_models=A100),
            "largest_node",
            f"placement: {NEVER}: one replica needs 600 GiB memory and the largest A100-80GB node has 500",
        ),
        (
            job("j", "a", gpu=1, cpu=20_000, mem=100 * 1024, allowed_gpu_models=("T4",)),
            "largest_node",
            f"placement: {NEVER}: one replica needs 20 CPU cores and the largest T4 node has 16",
        ),
        # Every model the job may use is named with its own limit.
        (
            job("j", "a", gpu=9),
            "largest_node",
            (
                f"placement: {NEVER}: on A100-80GB: one replica needs 9 A100-80GB GPUs and the largest A100-80GB node "
                "has 8; on T4: one replica needs 9 T4 GPUs and the largest T4 node has 4"
            ),
        ),
        # The gang's minimum: 3 replicas of 5 GPUs, one per 8-GPU node, 2 nodes.
        (
            job("j", "a", gpu=5, replicas=3, min_available=3, allowed_gpu_models=A100),
            "queue_ceiling",
            (
                f"quota: {NEVER}: needs 15 A100-80GB GPUs at once and queue q may hold at most 12 "
                "(nominal 8 + 4 it may borrow in cohort c)"
            ),
        ),
        (
            job("j", "a", gpu=4, replicas=3, min_available=3, cpu=40_000, allowed_gpu_models=A100),
            "cluster_total",
            (
                f"gang: {NEVER}: all 3 replicas must start together and the 2 A100-80GB nodes that could run one "
                "hold at most 2 of them with nothing else running"
            ),
        ),
        # A GPU model no node has (the queue lists it), or the queue does not list.
        (
            job("j", "a", gpu=1, allowed_gpu_models=("H100-80GB",)),
            "no_quota",
            f"quota: {NEVER}: queue q has no quota for H100-80GB",
        ),
        # Filters no cycle changes: a selector no node matches, taints none tolerates, MIG mode.
        (
            job("j", "a", gpu=1, node_selector=labels_of({"pool": "x"}), allowed_gpu_models=A100),
            "node_filters",
            (
                f"placement: {NEVER}: none of the 2 A100-80GB nodes passes the job's filters: "
                "2 node selector does not match"
            ),
        ),
        (
            job("j", "a", mig="1g.10gb", allowed_gpu_models=A100),
            "node_filters",
            f"placement: {NEVER}: none of the 2 A100-80GB nodes passes the job's filters: 2 MIG mode does not match",
        ),
        # A request no cycle can fix.
        (job("j", "nope", gpu=1), "invalid", "invalid: local queue nope does not exist"),
    ],
)
def test_a_job_that_can_never_run_is_told_the_limit(work, limit, message):
    reason = verdict(work)
    assert reason is not None
    assert (reason.waits, dict(reason.details)["limit"], reason.message) == (False, limit, message)


def test_resources_that_each_fit_some_node_but_not_one_together_are_named_together():
    nodes = [node("wide", cpu=64_000, mem=64_000), node("deep", cpu=8000, mem=512_000)]
    reason = verdict(job("j", "a", gpu=1, cpu=32_000, mem=100 * 1024, allowed_gpu_models=A100), nodes=nodes)
    assert reason is not None
    assert reason.message == (
        f"placement: {NEVER}: one replica needs 1 A100-80GB GPU, 32 CPU cores, 100 GiB memory on one node and no "
        "A100-80GB node has all of them"
    )


def test_a_mig_profile_the_model_does_not_offer_is_named():
    nodes = [node("m1", mig=True)]
    reason = verdict(
        job("j", "a", mig="2g.20gb", allowed_gpu_models=A100),
        nodes=nodes,
        mig_profiles=(("A100-80GB", ("1g.10gb", "3g.40gb")),),
    )
    assert reason is not None
    assert reason.message == f"placement: {NEVER}: A100-80GB does not offer MIG profile 2g.20gb"
    assert dict(reason.details)["limit"] == "catalogue"


def test_an_absent_gpu_model_is_named_with_the_models_the_cluster_has():
    queues = [cq("q", {"H100-80GB": 8, "A100-80GB": 8})]
    reason = verdict(job("j", "a", gpu=1, allowed_gpu_models=("H100-80GB",)), queues=queues)
    assert reason is not None
    assert reason.message == f"placement: {NEVER}: no node has GPU model H100-80GB (the cluster has A100-80GB, T4)"
    assert dict(reason.details) == {"limit": "absent_model", "gpu_model": "H100-80GB"}


@pytest.mark.parametrize(
    "work",
    [
        job("fits", "a", gpu=8, allowed_gpu_models=A100),
        job("twelve", "a", gpu=4, replicas=3, allowed_gpu_models=A100),  # 12 = the ceiling; 3 fit on 2 nodes
        job("partial", "a", gpu=5, replicas=3, min_available=2, allowed_gpu_models=A100),  # 2 of 3 suffice
        job("t4-or-a100", "a", gpu=6),  # too big for a T4 node, fine on an A100
        job("cpu-only", "a", cpu=64_000),
        job("tolerant", "a", gpu=1, tolerations=(Toleration("spot", "Exists"),)),
    ],
    ids=lambda w: w.id,
)
def test_a_job_that_fits_the_empty_cluster_is_not_called_never_fitting(work):
    assert verdict(work) is None


def test_a_cordoned_node_still_counts_as_configured_capacity():
    nodes = [node("a1", cordoned=True), node("a2", gpus=4)]
    assert verdict(job("j", "a", gpu=8, allowed_gpu_models=A100), nodes=nodes) is None
    tainted = [node("a1", taints=(Taint("spot", "true"),))]
    assert verdict(job("j", "a", gpu=1, allowed_gpu_models=A100), nodes=tainted) is not None


def test_the_cycle_sets_a_never_fitting_job_aside_with_no_estimate_and_no_preemption():
    snap = snapshot(
        NODES,
        QUEUES,
        [lq("a", "q")],
        [running("r", "a", [("a1", tuple(range(8)))]), job("j", "a", gpu=9, priority=10, allowed_gpu_models=A100)],
    )
    plan = run_cycle(snap, Policy(), NOW)
    info = pending_info(plan, "j")
    assert not info.reason.waits
    assert info.estimated_start is None
    assert plan.preemptions == ()


@pytest.mark.parametrize(
    ("running_gpus", "waits_for", "clause"),
    [
        # a1 holds 6 (2 free), a2 holds 6 (2 free): 4 are free in all, not on one node.
        (
            (6, 6),
            "fragmentation",
            (
                "needs 4 free A100-80GB GPUs on one node; eligible nodes have at most 2 free each and 4 in all "
                "(fragmentation)"
            ),
        ),
        # a1 holds 8, a2 holds 6: 2 free in all.
        (
            (8, 6),
            "capacity",
            (
                "needs 4 free A100-80GB GPUs on one node; eligible nodes have at most 2 free each and 2 in all "
                "(capacity in use)"
            ),
        ),
    ],
)
def test_a_job_that_waits_is_told_whether_capacity_is_in_use_or_fragmented(running_gpus, waits_for, clause):
    work = [
        running(f"r{i}", "a", [(name, tuple(range(n)))])
        for i, (name, n) in enumerate(zip(("a1", "a2"), running_gpus, strict=True))
    ]
    queues = [cq("q", {"A100-80GB": 64})]
    snap = snapshot(NODES[:2], queues, [lq("a", "q")], [*work, job("j", "a", gpu=4)])
    reason = pending_info(run_cycle(snap, Policy(), NOW), "j").reason
    assert reason.waits
    assert dict(reason.details)["waits_for"] == waits_for
    assert reason.message.endswith(clause)


def test_a_job_that_waits_for_quota_in_use_says_so():
    snap = snapshot(
        NODES,
        [cq("q", {"A100-80GB": 8})],
        [lq("a", "q")],
        [running("r", "a", [("a1", tuple(range(8)))]), job("j", "a", gpu=1, allowed_gpu_models=A100)],
    )
    reason = pending_info(run_cycle(snap, Policy(), NOW), "j").reason
    assert (reason.kind, reason.waits, dict(reason.details)["waits_for"]) == ("quota", True, "quota")
    assert reason.message == "quota: queue q uses 8 of 8 A100-80GB GPUs and needs 1 more; no cohort"


# -- properties: never_fits agrees with admission on the empty cluster ------------------------------


def fits_on_the_empty_cluster(snap: Snapshot, work: Workload) -> bool:
    """Whether ``work`` is admitted on the cluster as configured, by the engine's admission primitives
    (quota book, shapes, gang placement) and not by ``verdict``: nothing runs, no cordon."""
    empty = replace(snap, workloads=(), foreign=(), nodes=tuple(replace(n, unschedulable=False) for n in snap.nodes))
    cluster = Cluster(empty)
    placer = Placer(cluster, Policy(), dict(empty.mig_profiles))
    quota = QuotaBook(empty.cluster_queues)
    cq_name = {q.name: q.cluster_queue for q in empty.local_queues}[work.local_queue]
    for model in models_to_try(work, quota.flavors[cq_name]):
        shape = placer.shape_for(work, model)
        if isinstance(shape, str) or not quota.fits(cq_name, request_of(shape, work.gang_size)):
            continue
        if placer.can_place(work, shape, work.gang_size):
            return True
    return False


MODELS = ("A100-80GB", "A100-40GB", "T4")


@st.composite
def configurations(draw: Any) -> tuple[Snapshot, Workload]:
    nodes = []
    for i in range(draw(st.integers(1, 5))):
        model = draw(st.sampled_from((*MODELS, None)))
        nodes.append(
            node(
                f"n{i}",
                model,
                draw(st.sampled_from((1, 2, 4, 8))),
                cpu=draw(st.sampled_from((4000, 16_000, 64_000))),
                mem=draw(st.sampled_from((8000, 64_000))),
                labels={"pool": draw(st.sampled_from(("a", "b")))},
                taints=(Taint("spot", "true"),) if draw(st.integers(0, 4)) == 0 else (),
                cordoned=draw(st.integers(0, 4)) == 0,
                mig=model == "A100-80GB" and draw(st.booleans()),
                gpu_memory_gib={"A100-80GB": 80, "A100-40GB": 40, "T4": 16}.get(model or "", 0),
            )
        )
    flavors = {
        m: (draw(st.integers(0, 24)), draw(st.sampled_from((None, 0, 4))))
        for m in draw(st.lists(st.sampled_from(MODELS), min_size=1, max_size=3, unique=True))
    }
    cohort = draw(st.sampled_from(("", "c")))
    queues = [
        cq("q", flavors, cohort=cohort, cpu_milli=draw(st.sampled_from((None, 32_000)))),
        cq("other", {m: (draw(st.integers(0, 16)),) for m in MODELS}, cohort="c"),
    ]
    kind = draw(st.sampled_from(("whole", "whole", "fraction", "mig", "memory", "cpu")))
    request: dict[str, Any] = {
        "whole": {"gpu": draw(st.integers(1, 10))},
        "fraction": {"milli": draw(st.sampled_from((100, 500, 900)))},
        "mig": {"mig": draw(st.sampled_from(("1g.10gb", "3g.40gb", "4g.40gb", "7g.80gb", "2g.10gb")))},
        "memory": {"gpu_mem": draw(st.sampled_from((40, 100, 200)))},
        "cpu": {},
    }[kind]
    replicas = draw(st.integers(1, 4))
    work = job(
        "j",
        "a",
        **request,
        cpu=draw(st.sampled_from((1000, 8000, 20_000))),
        mem=draw(st.sampled_from((1000, 30_000))),
        replicas=replicas,
        min_available=draw(st.integers(0, replicas)),
        allowed_gpu_models=tuple(draw(st.lists(st.sampled_from(MODELS), max_size=2, unique=True))),
        node_selector=labels_of({"pool": "a"}) if draw(st.booleans()) else (),
        tolerations=(Toleration("spot", "Exists"),) if draw(st.booleans()) else (),
    )
    return snapshot(nodes, queues, [lq("a", "q")], []), work


@settings(max_examples=300, deadline=None)
@given(configurations())
def test_a_job_called_never_fitting_fits_on_no_empty_cluster_of_that_configuration(case):
    snap, work = case
    if never_fits(snap, work) is not None:
        assert not fits_on_the_empty_cluster(snap, work)


@settings(max_examples=300, deadline=None)
@given(configurations())
def test_a_job_that_fits_the_empty_cluster_is_never_called_never_fitting(case):
    snap, work = case
    if fits_on_the_empty_cluster(snap, work):
        assert never_fits(snap, work) is None
