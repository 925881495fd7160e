"""Preemption: within a ClusterQueue by priority, reclaiming lent quota, never non-preemptible jobs,
the smallest set of victims, and no preemption loops."""

from __future__ import annotations

from scheduling.engine.cycle import run_cycle
from scheduling.engine.model import Policy, ReasonKind

from .builders import admitted_ids, apply_plan, cq, job, lq, node, pending_info, running, snapshot

NOW = 10_000.0


def victims(plan):
    return sorted(p.workload_id for p in plan.preemptions)


def full_node_of_running(priorities, started=None, preemptible=None):
    """One 4-GPU node fully used by 1-GPU running jobs r0..r3."""
    started = started or [0.0] * 4
    preemptible = preemptible or [True] * 4
    return [
        running(f"r{i}", "a", [("n1", (i,))], priority=p, started=s, preemptible=ok)
        for i, (p, s, ok) in enumerate(zip(priorities, started, preemptible, strict=True))
    ]


def test_it_preempts_the_lowest_priority_job_first():
    snap = snapshot(
        [node("n1", gpus=4)],
        [cq("q", {"A100-80GB": 8})],
        [lq("a", "q")],
        [*full_node_of_running([5, 1, 3, 2]), job("urgent", "a", gpu=1, priority=10)],
    )
    plan = run_cycle(snap, Policy(), NOW)
    assert victims(plan) == ["r1"]
    info = pending_info(plan, "urgent")
    assert info.reason.kind == ReasonKind.PREEMPTING
    assert info.estimated_start == NOW
    assert "priority 10" in plan.preemptions[0].reason


def test_it_preempts_the_youngest_among_equal_priority():
    snap = snapshot(
        [node("n1", gpus=4)],
        [cq("q", {"A100-80GB": 8})],
        [lq("a", "q")],
        [*full_node_of_running([1, 1, 1, 1], started=[10, 40, 30, 20]), job("urgent", "a", gpu=1, priority=10)],
    )
    assert victims(run_cycle(snap, Policy(), NOW)) == ["r1"]


def test_it_takes_the_smallest_set_that_makes_room():
    # r0 (2 GPUs, lowest priority) alone is enough for a 2-GPU job; r1, r2 are not needed.
    snap = snapshot(
        [node("n1", gpus=4)],
        [cq("q", {"A100-80GB": 8})],
        [lq("a", "q")],
        [
            running("r1", "a", [("n1", (0,))], priority=2),
            running("r0", "a", [("n1", (1, 2))], priority=1),
            running("r2", "a", [("n1", (3,))], priority=3),
            job("urgent", "a", gpu=2, priority=10),
        ],
    )
    assert victims(run_cycle(snap, Policy(), NOW)) == ["r0"]


def test_it_never_preempts_a_non_preemptible_job():
    snap = snapshot(
        [node("n1", gpus=4)],
        [cq("q", {"A100-80GB": 8})],
        [lq("a", "q")],
        [*full_node_of_running([1, 1, 1, 1], preemptible=[False] * 4), job("urgent", "a", gpu=1, priority=10)],
    )
    plan = run_cycle(snap, Policy(), NOW)
    assert victims(plan) == []
    assert pending_info(plan, "urgent").reason.kind == ReasonKind.PLACEMENT


def test_it_never_preempts_equal_or_higher_priority_in_its_queue():
    snap = snapshot(
        [node("n1", gpus=4)],
        [cq("q", {"A100-80GB": 8})],
        [lq("a", "q")],
        [*full_node_of_running([10, 10, 11, 12]), job("same", "a", gpu=1, priority=10)],
    )
    assert victims(run_cycle(snap, Policy(), NOW)) == []


def test_preemption_can_be_switched_off():
    snap = snapshot(
        [node("n1", gpus=4)],
        [cq("q", {"A100-80GB": 8})],
        [lq("a", "q")],
        [*full_node_of_running([1, 1, 1, 1]), job("urgent", "a", gpu=1, priority=10)],
    )
    assert victims(run_cycle(snap, Policy(preemption=False), NOW)) == []


def test_a_queue_under_nominal_reclaims_quota_lent_to_the_cohort():
    # b lent its 4 GPUs to a (a borrowed them); b now wants 2 back: a's jobs are reclaimed, even though
    # they have a higher priority, because b stays within its nominal quota.
    snap = snapshot(
        [node("n1", gpus=8)],
        [cq("qa", {"A100-80GB": 4}, cohort="co"), cq("qb", {"A100-80GB": 4}, cohort="co")],
        [lq("a", "qa"), lq("b", "qb")],
        [
            *[running(f"a{i}", "a", [("n1", (i,))], priority=50, started=i) for i in range(8)],
            job("b-job", "b", gpu=2, priority=0),
        ],
    )
    plan = run_cycle(snap, Policy(), NOW)
    assert victims(plan) == ["a6", "a7"]  # the youngest borrowed ones
    assert all(p.reason.startswith("reclaim") for p in plan.preemptions)


def test_a_borrowing_queue_does_not_reclaim():
    snap = snapshot(
        [node("n1", gpus=8)],
        [cq("qa", {"A100-80GB": 4}, cohort="co"), cq("qb", {"A100-80GB": 2}, cohort="co")],
        [lq("a", "qa"), lq("b", "qb")],
        [
            *[running(f"a{i}", "a", [("n1", (i,))], started=i) for i in range(6)],
            running("b0", "b", [("n1", (6, 7))]),
            job("b-more", "b", gpu=2, priority=100),  # would put b at 4 > nominal 2
        ],
    )
    plan = run_cycle(snap, Policy(), NOW)
    assert victims(plan) == []
    assert pending_info(plan, "b-more").reason.kind == ReasonKind.QUOTA


def test_two_jobs_never_preempt_each_other_back_and_forth():
    """Jobs arrive over cycles, each plan is applied; every job is preempted at most once and it settles.

    Cycle 0: a runs a-hi and borrows b's quota for a-low. Cycle 1: b-job reclaims it (a-low is
    preempted). Cycle 3: b-hi outranks b-job inside b (b-job is preempted). Neither victim can take
    anything back: a-low's queue would borrow again, b-job is outranked in its own queue.
    """
    from dataclasses import replace

    arrivals = {
        0: [job("a-hi", "a", gpu=2, priority=9, created=0), job("a-low", "a", gpu=2, priority=1, created=1)],
        1: [job("b-job", "b", gpu=2, priority=0, created=2)],
        3: [job("b-hi", "b", gpu=2, priority=9, created=3)],
    }
    snap = snapshot(
        [node("n1", gpus=4)],
        [cq("qa", {"A100-80GB": 2}, cohort="co"), cq("qb", {"A100-80GB": 2}, cohort="co")],
        [lq("a", "qa"), lq("b", "qb")],
        [],
    )
    preempted: list[str] = []
    now = NOW
    for cycle in range(12):
        snap = replace(snap, workloads=snap.workloads + tuple(arrivals.get(cycle, [])))
        plan = run_cycle(snap, Policy(), now)
        preempted += [p.workload_id for p in plan.preemptions]
        snap = apply_plan(snap, plan, now)
        now += 1
    assert preempted == ["a-low", "b-job"]
    final = run_cycle(snap, Policy(), now)
    assert final.preemptions == ()
    assert admitted_ids(final) == []


def test_one_preemptor_per_queue_per_cycle_and_victims_are_not_shared():
    snap = snapshot(
        [node("n1", gpus=4)],
        [cq("q", {"A100-80GB": 8})],
        [lq("a", "q")],
        [
            *full_node_of_running([1, 1, 1, 1]),
            job("u1", "a", gpu=1, priority=10),
            job("u2", "a", gpu=1, priority=10, created=1),
        ],
    )
    plan = run_cycle(snap, Policy(), NOW)
    assert len(plan.preemptions) == 1
    two = run_cycle(snap, Policy(preemptors_per_queue=2), NOW)
    assert len({p.workload_id for p in two.preemptions}) == 2


def test_a_victim_of_a_borrowing_preemptor_is_not_readmitted_ahead_of_it():
    """Found by Hypothesis (``test_preemption_settles_and_never_hits_a_job_twice``). Queue q holds one
    H100 of its own and may borrow q2's idle one; low (priority 0) runs a 1g.10gb MIG slice, high
    (priority 1) wants two whole 7g.80gb GPUs: 2 GPUs of quota where 1.875 are free, so it preempts
    low. It needs to borrow, so the nominal pass defers it; low fits q's nominal quota and used to be
    re-admitted there first, taking the quota back, and high preempted it again, every other cycle.
    Now low waits behind high: high starts in the cycle after the preemption, low is preempted once."""
    from dataclasses import replace

    from scheduling.engine.model import ReplicaPlacement, WorkloadState

    low = replace(
        job("low", "a", mig="1g.10gb", cpu=500, mem=512),
        state=WorkloadState.RUNNING,
        gpu_model="H100-80GB",
        placements=(ReplicaPlacement("n0", (0,), 0, "1g.10gb", 6, cpu_milli=500, memory_mib=512),),
        started_at=NOW - 60,
    )
    high = job("high", "a", mig="7g.80gb", cpu=500, mem=512, replicas=2, priority=1, created=NOW)
    snap = snapshot(
        [node("n0", "H100-80GB", 2, cpu=8000, mem=16_000, mig=True, gpu_memory_gib=80)],
        [cq("q", {"H100-80GB": 1}, cohort="co"), cq("q2", {"H100-80GB": 1}, cohort="co")],
        [lq("a", "q")],
        [low, high],
    )
    first = run_cycle(snap, Policy(placement="binpack"), NOW)
    assert victims(first) == ["low"]
    snap = apply_plan(snap, first, NOW)
    second = run_cycle(snap, Policy(placement="binpack"), NOW + 1)
    assert admitted_ids(second) == ["high"]
    assert second.preemptions == ()
    assert pending_info(second, "low").reason.kind == ReasonKind.QUOTA
    snap = apply_plan(snap, second, NOW + 1)
    assert run_cycle(snap, Policy(placement="binpack"), NOW + 2).preemptions == ()


def test_a_job_within_nominal_goes_before_an_equal_priority_borrower_in_the_borrowing_pass():
    """Hypothesis found this loop: b3 (qb, within nominal) waits for the borrowing pass behind qb's
    deferred higher-priority a1; there b1 (qa, borrowing) took the last unit of the cohort, and the
    next cycle b3 reclaimed it from b1, again and again. Of equal priority, the job that fits its
    queue's nominal quota goes first (Kueue's rule), so b3 starts and nothing is preempted."""
    snap = snapshot(
        [node("n0", gpus=4), node("n1", gpus=4)],
        [cq("qa", {"A100-80GB": 2}, cohort="co"), cq("qb", {"A100-80GB": 4}, cohort="co")],
        [lq("la", "qa"), lq("lb", "qb")],
        [
            running("a0", "lb", [("n0", (0, 1))], priority=1),
            running("b6", "lb", [("n0", (2,))], priority=2),
            running("b0", "la", [("n0", (3,))], preemptible=False),
            running("b2", "la", [("n1", (0,))], preemptible=False),
            job("a1", "lb", gpu=2, priority=1, created=1),  # would borrow: qb uses 3 of 4
            job("b1", "la", gpu=1, created=101),  # would borrow: qa uses 2 of 2
            job("b3", "lb", gpu=1, created=103),  # fits qb's nominal: 4 of 4
        ],
    )
    plan = run_cycle(snap, Policy(), NOW)
    assert admitted_ids(plan) == ["b3"]
    assert plan.preemptions == ()
    after = apply_plan(snap, plan, NOW)
    assert run_cycle(after, Policy(), NOW + 1).preemptions == ()


def _lent_to_a_higher_priority_borrower(*, deferred_above: bool):
    """qb (nominal 4) lends 2 GPUs to qa's borrower hb (priority 2); qb's own b3 (priority 0, 2 GPUs)
    fits qb's nominal quota. With ``deferred_above``, qb also has a1 (priority 3, 4 GPUs), which would
    have to borrow and finds nothing to borrow, so b3 waits for the borrowing pass behind it."""
    workloads = [
        running("a0", "lb", [("n0", (0, 1))], priority=1, preemptible=False),
        running("r", "la", [("n1", (0, 1))], preemptible=False),
        running("hb", "la", [("n1", (2, 3))], priority=2),  # qa uses 4 of 2: borrows qb's 2
        job("b3", "lb", gpu=2, created=103),
    ]
    if deferred_above:
        workloads.append(job("a1", "lb", gpu=4, priority=3, created=1))
    return snapshot(
        [node("n0", gpus=4), node("n1", gpus=4)],
        [cq("qa", {"A100-80GB": 2}, cohort="co"), cq("qb", {"A100-80GB": 4}, cohort="co")],
        [lq("la", "qa"), lq("lb", "qb")],
        workloads,
    )


def test_a_job_in_the_borrowing_pass_does_not_reclaim_from_a_higher_priority_borrower():
    """Hypothesis found this loop: b3 waits for the borrowing pass behind a1 and reclaimed qb's lent
    GPUs from hb; the next cycle hb, of higher priority, came first in the borrowing pass and borrowed
    them back, every other cycle. In the borrowing pass a job reclaims only from jobs of at most its
    own priority (that pass orders them after it), so nothing is preempted and b3 is told why."""
    snap = _lent_to_a_higher_priority_borrower(deferred_above=True)
    now = NOW
    for _ in range(4):
        plan = run_cycle(snap, Policy(), now)
        assert plan.preemptions == ()
        assert admitted_ids(plan) == []
        snap, now = apply_plan(snap, plan, now), now + 1
    reason = pending_info(plan, "b3").reason
    assert reason.kind == ReasonKind.QUOTA
    assert reason.waits
    assert reason.message == (
        "quota: queue qb uses 2 of 4 A100-80GB GPUs and needs 2 more;"
        " 2 of its nominal quota is lent to other queues of cohort co and in use (it returns as their jobs finish)"
    )


def test_a_job_within_nominal_still_reclaims_lent_quota_in_the_nominal_pass():
    snap = _lent_to_a_higher_priority_borrower(deferred_above=False)
    first = run_cycle(snap, Policy(), NOW)
    assert victims(first) == ["hb"]
    snap = apply_plan(snap, first, NOW)
    second = run_cycle(snap, Policy(), NOW + 1)
    assert admitted_ids(second) == ["b3"]
    assert second.preemptions == ()
    snap = apply_plan(snap, second, NOW + 1)
    assert run_cycle(snap, Policy(), NOW + 2).preemptions == ()
