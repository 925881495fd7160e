"""Backfill reservations (docs/engine.md, "Backfill reservations"), checked against the rule: the first
``Policy.reserved_jobs`` jobs that wait for capacity hold the room they get at their shadow time (their
start given the jobs running now); a job decided after them may use that room only if it is expected
to end by the shadow time."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduling.engine import estimate
from scheduling.engine.cycle import _Cycle, run_cycle
from scheduling.engine.dryrun import RUNS_NOW, DryRun
from scheduling.engine.model import Policy, Workload

from .builders import admitted_ids, apply_plan, cq, job, lq, node, pending_info, reason_of, running, snapshot

NOW = 10_000.0
QUEUE = [cq("q", {"A100-80GB": 64})]
NODES = [node("n1", gpus=8), node("n2", gpus=8)]
RESERVE = Policy(reserved_jobs=1)  # off by default
# n1 is free; n2 is busy until +3000. The gang (2 x 8 GPUs, first in order) needs both nodes.
BUSY = [running("r2", "a", [("n2", tuple(range(8)))], started=NOW - 600, runtime=3600)]
GANG = job("gang", "a", gpu=8, replicas=2, runtime_s=600, created=NOW - 100)


def _single(runtime_s: float) -> Workload:
    return job("single", "a", gpu=8, runtime_s=runtime_s, created=NOW - 50)


def test_a_later_job_that_would_still_run_at_the_shadow_time_does_not_take_the_reserved_node():
    snap = snapshot(NODES, QUEUE, [lq("a", "q")], [*BUSY, GANG, _single(5000)])
    plan = run_cycle(snap, RESERVE, NOW)
    assert admitted_ids(plan) == []
    assert pending_info(plan, "gang").estimated_start == NOW + 3000
    # After the gang (+3000 to +3600), "single" takes a node.
    assert pending_info(plan, "single").estimated_start == NOW + 3600
    # Held: n1's 8 GPUs (n2's are busy) and the gang's CPU and memory on both nodes (1 core, 1 GiB each).
    assert reason_of(plan, "single").endswith(
        "; not counted: free 8 GPU(s), 2 CPU cores, 2 GiB memory reserved for gang, which start(s) first "
        "(this job would still run then)"
    )


def test_without_reservations_the_later_job_takes_the_free_node_and_the_gang_waits_for_it():
    snap = snapshot(NODES, QUEUE, [lq("a", "q")], [*BUSY, GANG, _single(5000)])
    plan = run_cycle(snap, Policy(reserved_jobs=0), NOW)
    assert admitted_ids(plan) == ["single"]
    assert pending_info(plan, "gang").estimated_start == NOW + 5000


def test_a_later_job_that_ends_by_the_shadow_time_is_backfilled_into_the_reserved_node():
    snap = snapshot(NODES, QUEUE, [lq("a", "q")], [*BUSY, GANG, _single(3000)])
    plan = run_cycle(snap, RESERVE, NOW)
    assert admitted_ids(plan) == ["single"]  # ends at +3000, the gang's shadow time
    assert pending_info(plan, "gang").estimated_start == NOW + 3000


def test_a_job_ordered_before_the_reserved_one_is_not_held_back():
    # Priority 1 goes first: decided before the gang's reservation is made, it takes n1.
    urgent = job("urgent", "a", gpu=8, runtime_s=5000, created=NOW - 50, priority=1)
    plan = run_cycle(
        snapshot(NODES, QUEUE, [lq("a", "q")], [*BUSY, GANG, urgent]), Policy(preemption=False, reserved_jobs=1), NOW
    )
    assert admitted_ids(plan) == ["urgent"]


def test_expected_submissions_do_not_take_the_reserved_node_before_the_gang():
    # "last" (8 GPUs, runs 2500 s) recurs at +1800 in the forecast; it would hold n1 past +3000, the
    # gang's shadow time, so it waits: the gang starts at +3000, not +4300 as without reservations.
    busy = [running("r1", "a", [("n1", tuple(range(8)))], started=NOW - 200, runtime=1200), *BUSY]
    last = job("last", "a", gpu=8, runtime_s=3600, created=NOW - 1800)
    snap = snapshot(NODES, QUEUE, [lq("a", "q")], [*busy, GANG], runtimes=(("last", 2500.0, 2500.0),), recent=(last,))
    assert (
        pending_info(run_cycle(snap, Policy(arrival_period_s=3600, reserved_jobs=1), NOW), "gang").estimated_start
        == NOW + 3000
    )
    plan = run_cycle(snap, Policy(arrival_period_s=3600, reserved_jobs=0), NOW)
    assert pending_info(plan, "gang").estimated_start == NOW + 4300


def test_a_dry_run_of_a_long_job_waits_behind_the_reservation_and_a_short_one_runs_now():
    dry = DryRun(snapshot(NODES, QUEUE, [lq("a", "q")], [*BUSY, GANG]), RESERVE, NOW)
    long = dry.check(job("long", "a", gpu=8, runtime_s=5000, created=NOW))
    assert long.verdict != RUNS_NOW
    assert long.estimated_start_p50 == NOW + 3600
    assert dry.check(job("short", "a", gpu=8, runtime_s=2000, created=NOW)).verdict == RUNS_NOW


# -- properties ------------------------------------------------------------------------------------

WORLDS = {
    # per node: (GPUs held, seconds until that holder ends)
    "busy": st.lists(st.tuples(st.integers(0, 8), st.integers(1, 40).map(lambda k: 100.0 * k)), min_size=2, max_size=4),
    # per waiting job: (GPUs per replica, replicas, runtime)
    "waiting": st.lists(
        st.tuples(
            st.sampled_from((1, 2, 4, 8)), st.sampled_from((1, 1, 2)), st.integers(1, 40).map(lambda k: 100.0 * k)
        ),
        min_size=1,
        max_size=6,
    ),
    "reserved": st.integers(1, 3),
}


def _world(busy: list[tuple[int, float]], waiting: list[tuple[int, int, float]]) -> list[Workload]:
    workloads: list[Workload] = [
        running(f"r{i}", "a", [(f"n{i}", tuple(range(g)))], started=NOW, runtime=left, cpu=100, mem=100)
        for i, (g, left) in enumerate(busy)
        if g
    ]
    workloads += [
        job(f"w{k}", "a", gpu=g, replicas=r, runtime_s=t, created=float(k), cpu=100, mem=100)
        for k, (g, r, t) in enumerate(waiting)
    ]
    return workloads


def _cycle(busy: list[tuple[int, float]], waiting: list[tuple[int, int, float]], reserved: int) -> _Cycle:
    snap = snapshot([node(f"n{i}", gpus=8) for i in range(len(busy))], QUEUE, [lq("a", "q")], _world(busy, waiting))
    cycle = _Cycle(snap, Policy(preemption=False, reserved_jobs=reserved), NOW)
    cycle.run()
    return cycle


def _fits_at(busy: list[tuple[int, float]], gpus: int, replicas: int, extra: list[tuple[str, int, float]]) -> float:
    """The first time a gang of ``replicas`` x ``gpus`` fits, given the running jobs (node i: ``busy[i]``)
    and ``extra`` holders (node, GPUs, end): GPUs are counted per node, each held until its end."""
    times = sorted({NOW} | {NOW + left for _, left in busy} | {end for _, _, end in extra})
    for t in times:
        free = {f"n{i}": 8 - (g if NOW + left > t else 0) for i, (g, left) in enumerate(busy)}
        for n, g, end in extra:
            if end > t:
                free[n] -= g
        if sum(f // gpus for f in free.values()) >= replicas:
            return t
    raise AssertionError("never fits")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**WORLDS)
def test_a_backfilled_job_uses_reserved_devices_only_if_it_ends_by_the_shadow_time(busy, waiting, reserved):
    cycle = _cycle(busy, waiting, reserved)
    assert len(cycle.reservations) <= reserved
    jobs = {w.id: w for w in cycle.snapshot.workloads}
    for r in cycle.reservations:
        held = {(p.node, d) for p in r.placements for d in p.gpu_indices}
        for admission in cycle.admissions:
            w = jobs[admission.workload_id]
            if w.created_at < jobs[r.job_id].created_at:
                continue  # ordered before the reserved job (one queue: by submission)
            used = {(p.node, d) for p in admission.placements for d in p.gpu_indices}
            if used & held:
                assert NOW + w.runtime_s <= r.shadow


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**WORLDS)
def test_the_first_reservation_is_at_the_first_time_the_job_fits_given_what_runs(busy, waiting, reserved):
    cycle = _cycle(busy, waiting, reserved)
    if not cycle.reservations:
        return
    first = cycle.reservations[0]
    w = next(w for w in cycle.snapshot.workloads if w.id == first.job_id)
    # What runs: the running jobs and the jobs this cycle admitted before it (each until its end).
    admitted = [
        (p.node, len(p.gpu_indices), NOW + a_job.runtime_s)
        for a_job, a in _admitted(cycle)
        if a_job.created_at < w.created_at
        for p in a.placements
    ]
    fits = _fits_at(busy, w.resources.gpu, w.replicas, admitted)
    # The forecast takes ends less than max(1 s, RESOLUTION of the time ahead) apart together (estimate.pop_step).
    assert fits - max(estimate.COALESCE_S, estimate.RESOLUTION * (fits - NOW)) <= first.shadow <= fits


def _admitted(cycle: _Cycle) -> list[tuple[Workload, object]]:
    jobs = {w.id: w for w in cycle.snapshot.workloads}
    return [(jobs[a.workload_id], a) for a in cycle.admissions]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    **WORLDS,
    later=st.tuples(
        st.sampled_from((1, 2, 4, 8)), st.sampled_from((1, 2)), st.integers(1, 80).map(lambda k: 100.0 * k)
    ),
)
def test_a_later_lower_order_submission_does_not_delay_a_reserved_jobs_start(busy, waiting, reserved, later):
    snap = snapshot([node(f"n{i}", gpus=8) for i in range(len(busy))], QUEUE, [lq("a", "q")], _world(busy, waiting))
    policy = Policy(preemption=False, reserved_jobs=reserved)
    cycle = _Cycle(snap, policy, NOW)
    before = cycle.run()
    g, r, t = later
    newer = job("later", "a", gpu=g, replicas=r, runtime_s=t, created=NOW, cpu=100, mem=100)
    after = run_cycle(replace(snap, workloads=(*snap.workloads, newer)), policy, NOW)
    for reservation in cycle.reservations:
        start = pending_info(before, reservation.job_id).estimated_start
        later_start = pending_info(after, reservation.job_id).estimated_start
        assert start is not None
        assert later_start is not None
        # Within the forecast's resolution (ends taken together, ``estimate.pop_step``).
        assert later_start <= start + max(estimate.COALESCE_S, estimate.RESOLUTION * (start - NOW))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    **WORLDS,
    queues=st.lists(st.sampled_from(("a", "b")), min_size=6, max_size=6),
    new=st.tuples(
        st.sampled_from((1, 2, 4, 8)),
        st.sampled_from((1, 2)),
        st.integers(1, 80).map(lambda k: 100.0 * k),
        st.sampled_from(("a", "b")),
        st.sampled_from((-1, 0, 1)),
    ),
)
def test_the_dry_run_holds_back_what_the_next_cycle_holds_back(busy, waiting, reserved, queues, new):
    """Two local queues (fair share orders them) and jobs of three priorities: on a snapshot the cycle
    has settled, the dry run's verdict, placements and reason for a job are the next cycle's, the
    reservations made before its place in the order held back."""
    lqs = [lq("a", "q"), lq("b", "q")]
    workloads = [replace(w, local_queue=queues[k % 6], team=queues[k % 6]) for k, w in enumerate(_world(busy, waiting))]
    snap = snapshot([node(f"n{i}", gpus=8) for i in range(len(busy))], QUEUE, lqs, workloads)
    policy = Policy(placement="binpack", preemption=False, reserved_jobs=reserved)
    for _ in range(3):  # settle: apply the plan until the cycle admits nothing more
        plan = run_cycle(snap, policy, NOW)
        if not plan.admissions:
            break
        snap = apply_plan(snap, plan, NOW)
    else:
        return
    g, r, t, queue, priority = new
    candidate = job("new", queue, gpu=g, replicas=r, runtime_s=t, created=NOW, priority=priority, cpu=100, mem=100)
    check = DryRun(snap, policy, NOW).check(candidate)
    plan = run_cycle(replace(snap, workloads=(*snap.workloads, candidate)), policy, NOW)
    admitted = {a.workload_id: a for a in plan.admissions}
    if "new" in admitted:
        assert check.verdict == RUNS_NOW
        assert check.placements == admitted["new"].placements
    else:
        assert check.verdict != RUNS_NOW
        assert check.reason == pending_info(plan, "new").reason
