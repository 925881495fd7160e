"""Quota per ClusterQueue and GPU model: nominal, cohort borrowing and lending limits, CPU/memory,
flavor order."""

from __future__ import annotations

import pytest

from scheduling.engine.cycle import run_cycle
from scheduling.engine.model import FlavorQuota, Policy, ReasonKind
from scheduling.engine.quota import QuotaBook, gpu_key

from .builders import admitted_ids, cq, job, lq, node, pending_info, reason_of, running, snapshot

NOW = 1000.0
BIG = [node(f"n{i}") for i in range(4)]  # 32 GPUs: placement never the limit here


@pytest.mark.parametrize(
    ("case", "a_quota", "b_quota", "b_running", "request_gpus", "admitted", "borrowed"),
    [
        ("within nominal", 4, 4, 0, 4, True, False),
        ("borrows b's unused quota", 4, 4, 0, 8, True, True),
        ("cannot borrow what b uses", 4, 4, 4, 8, False, None),
        ("borrowing limit caps it", (4, 2), 4, 0, 8, False, None),
        ("borrowing limit allows up to nominal+limit", (4, 4), 4, 0, 8, True, True),
        ("lending limit keeps b's guaranteed part", 4, (4, None, 1), 0, 6, False, None),
        ("lending limit lends that much", 4, (4, None, 2), 0, 6, True, True),
    ],
)
def test_cohort_borrowing_and_limits(case, a_quota, b_quota, b_running, request_gpus, admitted, borrowed):
    def flavor(q):
        return q if isinstance(q, tuple) else (q,)

    b_work = [running("rb", "qb", [("n3", tuple(range(b_running)))])] if b_running else []
    snap = snapshot(
        BIG,
        [
            cq("a", {"A100-80GB": flavor(a_quota)}, cohort="co"),
            cq("b", {"A100-80GB": flavor(b_quota)}, cohort="co"),
        ],
        [lq("qa", "a"), lq("qb", "b")],
        [*b_work, job("j", "qa", gpu=request_gpus)],
    )
    plan = run_cycle(snap, Policy(preemption=False), NOW)
    assert (admitted_ids(plan) == ["j"]) is admitted, case
    if admitted:
        assert plan.admissions[0].borrowed is borrowed
    else:
        assert pending_info(plan, "j").reason.kind == ReasonKind.QUOTA


def test_a_queue_without_a_cohort_never_borrows():
    snap = snapshot(
        BIG,
        [cq("a", {"A100-80GB": 4}), cq("b", {"A100-80GB": 16})],
        [lq("qa", "a")],
        [job("j", "qa", gpu=5)],
    )
    plan = run_cycle(snap, Policy(), NOW)
    assert reason_of(plan, "j") == (
        "quota: never fits as configured: needs 5 A100-80GB GPUs at once and queue a may hold at most 4 "
        "(its nominal quota; no cohort to borrow from)"
    )


def test_it_takes_the_first_gpu_model_with_room_in_flavor_order():
    nodes = [node("a1", "A100-80GB", 4), node("h1", "H100-80GB", 4)]
    queue = cq("q", {"H100-80GB": 2, "A100-80GB": 8})
    snap = snapshot(
        nodes,
        [queue],
        [lq("l", "q")],
        [job("first", "l", gpu=2), job("second", "l", gpu=2, created=1)],
    )
    plan = run_cycle(snap, Policy(), NOW)
    models = {a.workload_id: a.gpu_model for a in plan.admissions}
    assert models == {"first": "H100-80GB", "second": "A100-80GB"}


def test_allowed_gpu_models_restrict_the_flavors():
    nodes = [node("a1", "A100-80GB", 4), node("h1", "H100-80GB", 4)]
    snap = snapshot(
        nodes,
        [cq("q", {"H100-80GB": 8, "A100-80GB": 8})],
        [lq("l", "q")],
        [job("j", "l", gpu=1, allowed_gpu_models=("A100-80GB",)), job("none", "l", gpu=1, allowed_gpu_models=("L4",))],
    )
    plan = run_cycle(snap, Policy(), NOW)
    assert [(a.workload_id, a.gpu_model) for a in plan.admissions] == [("j", "A100-80GB")]
    assert reason_of(plan, "none") == "quota: never fits as configured: queue q has no quota for L4"


@pytest.mark.parametrize(
    ("cpu_quota", "memory_quota", "admitted"),
    [(8000, None, ["a", "b"]), (6000, None, ["a"]), (None, 4096, ["a", "b"]), (None, 3000, ["a"])],
)
def test_cpu_and_memory_quota(cpu_quota, memory_quota, admitted):
    snap = snapshot(
        [node("c1", None, cpu=64_000)],
        [cq("q", cpu_milli=cpu_quota, memory_mib=memory_quota)],
        [lq("l", "q")],
        [job("a", "l", cpu=4000, mem=2048), job("b", "l", cpu=4000, mem=2048, created=1)],
    )
    assert admitted_ids(run_cycle(snap, Policy(), NOW)) == admitted


@pytest.mark.parametrize(("cores", "admitted"), [(4, True), (5, False)])
def test_cpu_quota_is_borrowed_from_the_cohort_up_to_the_lending_limit(cores, admitted):
    snap = snapshot(
        [node("c1", None, cpu=64_000)],
        [cq("a", cohort="co", cpu_milli=2000), cq("b", cohort="co", cpu_milli=6000, cpu_lending_limit_milli=2000)],
        [lq("l", "a")],
        [job("j", "l", cpu=cores * 1000)],
    )
    plan = run_cycle(snap, Policy(), NOW)
    if admitted:
        assert plan.admissions[0].borrowed
    else:
        assert reason_of(plan, "j") == (
            "quota: never fits as configured: needs 5 CPU cores at once and queue a may hold at most 4 "
            "(nominal 2 + 2 it may borrow in cohort co)"
        )


def test_jobs_within_nominal_quota_go_before_borrowing_ones():
    snap = snapshot(
        [node("n1", gpus=8)],
        [cq("a", {"A100-80GB": 2}, cohort="co"), cq("b", {"A100-80GB": 2}, cohort="co")],
        [lq("qa", "a"), lq("qb", "b")],
        [job("a-borrows", "qa", gpu=4, priority=5, created=0), job("b-nominal", "qb", gpu=2, created=1)],
    )
    plan = run_cycle(snap, Policy(preemption=False), NOW)
    assert admitted_ids(plan) == ["b-nominal"]
    assert reason_of(plan, "a-borrows").startswith("quota: queue a uses 0 of 2 A100-80GB GPUs and needs 4")


def test_fractions_and_mig_slices_charge_quota_in_milli_gpus():
    nodes = [node("n1", gpus=1), node("m1", "A100-80GB", 1, mig=True)]
    snap = snapshot(
        nodes,
        [cq("q", {"A100-80GB": 1})],
        [lq("l", "q")],
        [
            job("half", "l", milli=500),
            job("mig-half", "l", mig="3g.40gb", created=1),  # 4 of 8 memory slices = 500 milli
            job("one-more", "l", milli=100, created=2),
        ],
    )
    plan = run_cycle(snap, Policy(), NOW)
    assert admitted_ids(plan) == ["half", "mig-half"]
    assert pending_info(plan, "one-more").reason.kind == ReasonKind.QUOTA


def test_quota_flavor_dataclass_defaults_are_unlimited():
    assert FlavorQuota("A100-80GB", 4).borrowing_limit is None


@pytest.mark.parametrize(
    ("queue", "ceiling_gpus"),
    [
        ("a", 4 + 2),  # a's nominal plus what b lends (b keeps 4 of its 6)
        ("b", 6 + 1),  # b's nominal plus its borrowing limit, below the 4 a lends
        ("alone", 3),  # no cohort: exactly the nominal quota
    ],
)
def test_a_queues_ceiling_is_its_nominal_quota_plus_what_it_may_borrow(queue, ceiling_gpus):
    book = QuotaBook(
        (
            cq("a", {"A100-80GB": 4}, cohort="co"),
            cq("b", {"A100-80GB": (6, 1, 2)}, cohort="co"),
            cq("alone", {"A100-80GB": 3}),
        )
    )
    assert book.ceiling(queue, gpu_key("A100-80GB")) == ceiling_gpus * 1000
    assert book.ceiling(queue, gpu_key("H100-80GB")) is None


def test_restoring_saved_usage_undoes_every_add_since():
    from scheduling.engine.admission import FairShare

    queues = (cq("a", {"A100-80GB": 8}, cohort="c"), cq("b", {"A100-80GB": 8}, cohort="c"))
    local = (lq("la", "a"), lq("lb", "b"))
    book, fresh = QuotaBook(queues), QuotaBook(queues)
    fair = FairShare(queues, local, {"a": {gpu_key("A100-80GB"): 8000}, "b": {gpu_key("A100-80GB"): 8000}}, {})
    first = {gpu_key("A100-80GB"): 3000}
    book.add("a", first)
    fresh.add("a", first)
    fair.add("la", "a", first)
    saved, saved_fair = book.save_usage(), fair.save_usage()
    share_a, share_la = fair.cq_share("a"), fair.lq_share("la")
    book.add("a", {gpu_key("A100-80GB"): 9000})  # past its nominal quota: borrows from the cohort
    book.add("b", {gpu_key("A100-80GB"): 2000})
    book.add("a", first, -1)
    fair.add("la", "a", {gpu_key("A100-80GB"): 9000})
    fair.add("lb", "b", {gpu_key("A100-80GB"): 2000})
    assert fair.cq_share("a") != share_a
    book.restore_usage(saved)
    fair.restore_usage(saved_fair)
    for queue in ("a", "b"):
        assert book.available(queue, gpu_key("A100-80GB")) == fresh.available(queue, gpu_key("A100-80GB"))
        assert book.used(queue, gpu_key("A100-80GB")) == fresh.used(queue, gpu_key("A100-80GB"))
    assert book.pool_free("a", gpu_key("A100-80GB")) == fresh.pool_free("a", gpu_key("A100-80GB"))
    assert (fair.cq_share("a"), fair.lq_share("la"), fair.cq_share("b")) == (share_a, share_la, 0.0)


def test_a_queues_room_stands_until_its_own_or_its_cohorts_usage_changes():
    # What the forecast's skip of a job that failed on quota alone reads (``QuotaBook.room_unchanged_since``):
    # a queue's room depends on its usage and on the pool its cohort lends, so a change of a cohort
    # member changes it, one of a queue outside the cohort does not, and a restore changes every queue's.
    gpus = gpu_key("A100-80GB")
    book = QuotaBook(
        (cq("a", {"A100-80GB": 4}, cohort="c"), cq("b", {"A100-80GB": 4}, cohort="c"), cq("alone", {"A100-80GB": 4}))
    )
    stamp = book.changes
    room = book.replicas_with_room("a", {gpus: 1000}, 10, borrow=True)
    book.add("alone", {gpus: 2000})
    assert book.room_unchanged_since(stamp, "a")
    assert book.replicas_with_room("a", {gpus: 1000}, 10, borrow=True) == room
    book.add("b", {gpus: 3000})  # past its own quota: borrows from the pool "a" would borrow from
    assert not book.room_unchanged_since(stamp, "a")
    assert book.replicas_with_room("a", {gpus: 1000}, 10, borrow=True) < room
    assert not book.room_unchanged_since(stamp, "alone")
    stamp = book.changes
    saved = book.save_usage()
    assert book.room_unchanged_since(stamp, "alone")
    assert book.room_unchanged_since(stamp, "a")
    book.restore_usage(saved)
    assert not book.room_unchanged_since(stamp, "alone")
