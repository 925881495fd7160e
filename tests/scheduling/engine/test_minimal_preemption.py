"""Minimal victim sets: no victim that could be spared, at any number of candidates; among minimal
sets the one losing the least work (highest victim priority, then GPU-seconds lost, then the oldest
victim's start, later being better); a priority class's minimum runtime protects a job; and each
victim's reason names the rule that chose it.

The oracle is written from the rule, not from the engine's search: a set of victims *lets the job
fit* when a cycle without them (and without preemption) admits the job; the expected set is the
cheapest such set by the order above, found by trying every subset.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import combinations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduling.engine.cycle import run_cycle
from scheduling.engine.model import Policy, Snapshot

from .builders import cq, job, lq, node, running, snapshot

NOW = 100_000.0
QUEUES = ([cq("q", {"A100-80GB": 1000})], [lq("a", "q")])


def victims(plan) -> list[str]:
    return sorted(p.workload_id for p in plan.preemptions)


def notebooks_and_a_big_job(notebook_age_s: float, big_age_s: float) -> list:
    """Forty 0.1-GPU notebooks spread over n1's eight GPUs, one 8-GPU job on n2, same priority."""
    notebooks = [
        running(f"nb{i:02}", "a", [("n1", (i % 8,))], gpu_milli=100, started=NOW - notebook_age_s + i)
        for i in range(40)
    ]
    big = running("big", "a", [("n2", tuple(range(8)))], started=NOW - big_age_s)
    return [*notebooks, big]


def test_young_notebooks_lose_less_work_than_the_big_job_so_they_go_and_nothing_else():
    # 40 x 0.1 GPU x ~600 s = ~2,400 GPU-s against 8 GPU x 36,000 s = 288,000 GPU-s.
    snap = snapshot(
        [node("n1"), node("n2")],
        *QUEUES,
        [*notebooks_and_a_big_job(600, 36_000), job("urgent", "a", gpu=8, priority=10)],
    )
    plan = run_cycle(snap, Policy(), NOW)
    assert victims(plan) == [f"nb{i:02}" for i in range(40)]


def test_a_big_job_that_just_started_loses_less_work_so_it_alone_goes():
    # 8 GPU x 60 s = 480 GPU-s against 40 x 0.1 GPU x ~36,000 s = ~144,000 GPU-s.
    snap = snapshot(
        [node("n1"), node("n2")],
        *QUEUES,
        [*notebooks_and_a_big_job(36_000, 60), job("urgent", "a", gpu=8, priority=10)],
    )
    plan = run_cycle(snap, Policy(), NOW)
    assert victims(plan) == ["big"]
    (reason,) = [p.reason for p in plan.preemptions]
    assert reason.startswith("priority: urgent (priority 10) outranks it (priority 0)")
    assert "rule: least-work minimal victim set" in reason
    assert "it loses 480 GPU-seconds" in reason


def test_a_lower_priority_set_goes_before_a_higher_one_whatever_the_work():
    snap = snapshot(
        [node("n1", gpus=2), node("n2", gpus=2)],
        *QUEUES,
        [
            running("low-old", "a", [("n1", (0, 1))], priority=1, started=0.0),
            running("mid-new", "a", [("n2", (0, 1))], priority=5, started=NOW - 1),
            job("urgent", "a", gpu=2, priority=10),
        ],
    )
    assert victims(run_cycle(snap, Policy(), NOW)) == ["low-old"]


def test_victims_are_minimal_beyond_256_candidates():
    # n1's eight GPUs hold 320 jobs of 25 milli-GPU each: all must go for an 8-GPU job, and none else.
    tiny = [running(f"t{i:03}", "a", [("n1", (i % 8,))], gpu_milli=25, started=NOW - 100) for i in range(320)]
    others = [running(f"x{i}", "a", [("n2", (i,))], started=0.0) for i in range(7)]
    snap = snapshot([node("n1"), node("n2")], *QUEUES, [*tiny, *others, job("urgent", "a", gpu=8, priority=10)])
    assert victims(run_cycle(snap, Policy(), NOW)) == sorted(w.id for w in tiny)


def test_a_job_within_its_minimum_runtime_is_not_preempted():
    snap = snapshot(
        [node("n1", gpus=2)],
        *QUEUES,
        [
            running("young", "a", [("n1", (0,))], started=NOW - 60, min_runtime_s=600),
            running("old", "a", [("n1", (1,))], started=NOW - 3600, min_runtime_s=600),
            job("urgent", "a", gpu=1, priority=10),
        ],
    )
    # "young" loses less work, but has run 60 of its 600 protected seconds.
    assert victims(run_cycle(snap, Policy(), NOW)) == ["old"]
    # Ten minutes on, both may go, and "young" (660 GPU-s) loses less than "old" (4,200 GPU-s).
    assert victims(run_cycle(snap, Policy(), NOW + 600)) == ["young"]


def test_no_victims_while_every_candidate_is_protected():
    snap = snapshot(
        [node("n1", gpus=1)],
        *QUEUES,
        [
            running("young", "a", [("n1", (0,))], started=NOW - 60, min_runtime_s=600),
            job("urgent", "a", gpu=1, priority=10),
        ],
    )
    assert victims(run_cycle(snap, Policy(), NOW)) == []


def test_a_job_blocked_by_a_minimum_runtime_is_told_whom_it_would_preempt_and_when():
    snap = snapshot(
        [node("n1", gpus=2)],
        *QUEUES,
        [
            running("young", "a", [("n1", (0,))], started=NOW - 60, min_runtime_s=600),
            running("younger", "a", [("n1", (1,))], started=NOW - 30, min_runtime_s=600),
            job("urgent", "a", gpu=1, priority=10),
            job("big", "a", gpu=2, priority=10),
        ],
    )
    plan = run_cycle(snap, Policy(), NOW)
    assert victims(plan) == []
    reasons = {p.workload_id: p.reason for p in plan.pending}
    # One GPU: the victim losing least work is "younger" (30 GPU-s), protected for 570 s more: 10 min.
    urgent = reasons["urgent"]
    assert urgent.waits
    assert "would preempt younger once it has run the minimum runtime of its priority class (in 10 min)" in (
        urgent.message
    )
    assert dict(urgent.details)["preempts_after"] == NOW - 30 + 600
    # Two GPUs: both must go; the later of the two protections ends at NOW + 570 s.
    big = reasons["big"]
    assert "would preempt " in big.message
    assert sorted(dict(big.details)["protected"].split(", ")) == ["young", "younger"]
    assert dict(big.details)["preempts_after"] == NOW - 30 + 600


def test_no_protection_note_when_the_protected_jobs_would_not_make_room():
    snap = snapshot(
        [node("n1", gpus=1), node("n2", gpus=1)],
        *QUEUES,
        [
            running("young", "a", [("n1", (0,))], started=NOW - 60, min_runtime_s=600),
            job("huge", "a", gpu=2, priority=10),  # a 2-GPU pod fits no 1-GPU node, victims or not
        ],
    )
    reason = {p.workload_id: p.reason for p in run_cycle(snap, Policy(), NOW).pending}["huge"]
    assert "would preempt" not in reason.message
    assert "preempts_after" not in dict(reason.details)


# -- properties on small, brute-forceable clusters -----------------------------------------------------


@st.composite
def small_clusters(draw) -> Snapshot:
    """Two or three small nodes, full or nearly full of low-priority jobs, and one urgent job."""
    node_count = draw(st.integers(2, 3))
    nodes = [node(f"n{i}", gpus=draw(st.sampled_from((2, 4)))) for i in range(node_count)]
    workloads = []
    k = 0
    for n in nodes:
        device = 0
        while device < n.gpu_count and k < 7:
            if draw(st.booleans()):
                size = draw(st.integers(1, n.gpu_count - device))
                devices = tuple(range(device, device + size))
                device += size
                milli = 1000
            else:
                devices, milli = (device,), draw(st.sampled_from((250, 500)))
                device += 1
            workloads.append(
                running(
                    f"r{k}",
                    "a",
                    [(n.name, devices)],
                    gpu_milli=milli,
                    priority=draw(st.integers(0, 2)),
                    started=NOW - draw(st.sampled_from((10, 100, 1000))),
                )
            )
            k += 1
    gpus = draw(st.integers(1, 4))
    replicas = draw(st.integers(1, 2))
    quota = draw(st.sampled_from((1000, 12)))  # 12: some runs are also short of quota
    urgent = job("urgent", "a", gpu=gpus, replicas=replicas, priority=10, cpu=0, mem=0)
    return snapshot(nodes, [cq("q", {"A100-80GB": quota})], [lq("a", "q")], [*workloads, urgent])


def admits_without(snap: Snapshot, removed: set[str]) -> bool:
    workloads = tuple(w for w in snap.workloads if w.id not in removed)
    plan = run_cycle(replace(snap, workloads=workloads), Policy(preemption=False), NOW)
    return any(a.workload_id == "urgent" for a in plan.admissions)


def cost(snap: Snapshot, ids: tuple[str, ...]) -> tuple:
    """The rule's order, written out: highest priority, GPU-seconds lost, oldest start (later better),
    size, ids."""
    by_id = {w.id: w for w in snap.workloads}
    chosen = [by_id[i] for i in ids]

    def gpu_milli(w) -> int:
        return sum(p.gpu_milli * len(p.gpu_indices) for p in w.placements)

    started = {w.id: w.started_at or 0.0 for w in chosen}
    return (
        max(w.priority for w in chosen),
        sum(round(gpu_milli(w) * (NOW - started[w.id])) for w in chosen),
        -min(started.values()),
        len(chosen),
        tuple(sorted(ids)),
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_clusters())
def test_the_chosen_set_is_minimal_and_the_cheapest_that_lets_the_job_fit(snap):
    plan = run_cycle(snap, Policy(), NOW)
    chosen = victims(plan)
    candidates = [w.id for w in snap.workloads if w.id != "urgent"]
    feasible = [
        ids
        for size in range(1, len(candidates) + 1)
        for ids in combinations(candidates, size)
        if admits_without(snap, set(ids))
    ]
    if admits_without(snap, set()):
        assert chosen == []  # it fits as it is: admitted, nobody preempted
        return
    if not feasible:
        assert chosen == []
        return
    # Minimal: every victim is needed.
    for victim in chosen:
        assert not admits_without(snap, set(chosen) - {victim}), victim
    # Cheapest by the rule's order among every set that lets the job fit.
    best = min(feasible, key=lambda ids: cost(snap, ids))
    assert chosen == sorted(best)
