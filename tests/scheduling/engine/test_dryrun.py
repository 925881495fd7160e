"""The dry run (scheduling.engine.dryrun): what the next cycle decides for a job not submitted, and
when it starts. Each answer is checked against the next cycle run with the job submitted on the same
snapshot, and against figures worked out by hand from the cluster's shape."""

from __future__ import annotations

import pickle
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduling.engine.cycle import run_cycle
from scheduling.engine.dryrun import NEVER, RUNS_NOW, WAITS, DryRun
from scheduling.engine.estimate import P50
from scheduling.engine.model import Policy, ReasonKind, Snapshot, Workload

from .builders import cq, job, lq, node, pending_info, running, snapshot

NOW = 1000.0
QUEUE = [cq("q", {"A100-80GB": 64, "H100-80GB": 64})]


def with_job(snap: Snapshot, w: Workload) -> Snapshot:
    return replace(snap, workloads=(*snap.workloads, w))


def next_cycle(snap: Snapshot, w: Workload, policy: Policy | None = None):
    """The next cycle's plan with ``w`` submitted."""
    return run_cycle(with_job(snap, w), policy or Policy(), NOW)


def test_a_job_that_fits_runs_now_on_the_nodes_and_devices_the_next_cycle_gives_it():
    snap = snapshot(
        [node("n1", gpus=8), node("n2", gpus=8)],
        QUEUE,
        [lq("a", "q")],
        [running("r", "a", [("n1", (0, 1, 2, 3))], started=NOW - 10, runtime=100)],
    )
    candidate = job("new", "a", gpu=2, created=NOW)
    check = DryRun(snap, Policy(), NOW).check(candidate)
    assert check.verdict == RUNS_NOW
    assert check.gpu_model == "A100-80GB"
    admitted = next(a for a in next_cycle(snap, candidate).admissions if a.workload_id == "new")
    assert check.placements == admitted.placements
    assert check.estimated_start_p50 == NOW


def test_a_job_too_big_for_every_node_never_runs_and_names_the_largest_node():
    snap = snapshot([node("n1", gpus=8), node("n2", gpus=4)], QUEUE, [lq("a", "q")], [])
    check = DryRun(snap, Policy(), NOW).check(job("big", "a", gpu=16, allowed_gpu_models=("A100-80GB",)))
    assert check.verdict == NEVER
    assert check.reason is not None
    assert not check.reason.waits
    details = dict(check.reason.details)
    # From the cluster's shape: 16 GPUs asked, the largest A100 node has 8.
    assert (details["limit"], details["needed"], details["largest"]) == ("largest_node", 16_000, 8_000)
    assert check.estimated_start_p50 is None


def test_a_waiting_job_gets_the_reason_and_the_start_the_next_cycle_gives_it():
    # n1 (8 GPUs) is full: r0 (4 GPUs) ends at NOW+300, r1 (4 GPUs) at NOW+900 (started + runtime).
    snap = snapshot(
        [node("n1", gpus=8)],
        QUEUE,
        [lq("a", "q")],
        [
            running("r0", "a", [("n1", (0, 1, 2, 3))], started=NOW - 100, runtime=400),
            running("r1", "a", [("n1", (4, 5, 6, 7))], started=NOW - 100, runtime=1000),
        ],
    )
    candidate = job("new", "a", gpu=4, created=NOW, allowed_gpu_models=("A100-80GB",))
    check = DryRun(snap, Policy(), NOW).check(candidate)
    assert check.verdict == WAITS
    info = pending_info(next_cycle(snap, candidate), "new")
    assert check.reason == info.reason
    assert check.reason is not None
    assert check.reason.kind == ReasonKind.PLACEMENT
    assert check.estimated_start_p50 == info.estimated_start == NOW + 300
    assert check.position == info.position == 1
    assert [p.node for p in check.placements] == ["n1"]  # where the forecast starts it


def test_fragmentation_counts_a_four_gpu_job_waits_for_one_node_to_drain_not_for_four_free_gpus():
    # Two free GPUs on each of two nodes: four free in all, but no node has four until r1 ends.
    snap = snapshot(
        [node("n1", gpus=4), node("n2", gpus=4)],
        QUEUE,
        [lq("a", "q")],
        [
            running("r1", "a", [("n1", (0, 1))], started=NOW, runtime=500),
            running("r2", "a", [("n2", (0, 1))], started=NOW, runtime=2000),
        ],
    )
    candidate = job("new", "a", gpu=4, created=NOW, allowed_gpu_models=("A100-80GB",))
    check = DryRun(snap, Policy(), NOW).check(candidate)
    assert check.verdict == WAITS
    assert dict(check.reason.details)["waits_for"] == "fragmentation"  # type: ignore[union-attr]
    assert check.estimated_start_p50 == NOW + 500
    assert [p.node for p in check.placements] == ["n1"]


def test_a_gang_starts_when_enough_nodes_are_free_together():
    # Three 8-GPU nodes, each full until NOW+100, +200, +300; a gang of two 8-GPU replicas.
    snap = snapshot(
        [node(f"n{i}", gpus=8) for i in range(3)],
        QUEUE,
        [lq("a", "q")],
        [running(f"r{i}", "a", [(f"n{i}", tuple(range(8)))], started=NOW, runtime=100.0 * (i + 1)) for i in range(3)],
    )
    candidate = job("gang", "a", gpu=8, replicas=2, created=NOW, allowed_gpu_models=("A100-80GB",))
    check = DryRun(snap, Policy(), NOW).check(candidate)
    assert check.estimated_start_p50 == NOW + 200
    assert sorted(p.node for p in check.placements) == ["n0", "n1"]


def test_a_high_priority_job_preempts_whom_the_next_cycle_preempts():
    snap = snapshot(
        [node("n1", gpus=8)],
        QUEUE,
        [lq("a", "q")],
        [running("low", "a", [("n1", tuple(range(8)))], started=NOW, runtime=5000, priority=0)],
    )
    candidate = job("urgent", "a", gpu=8, priority=100, created=NOW, allowed_gpu_models=("A100-80GB",))
    check = DryRun(snap, Policy(), NOW).check(candidate)
    assert check.verdict == WAITS
    plan = next_cycle(snap, candidate)
    assert check.preempts == tuple(p.workload_id for p in plan.preemptions if p.preemptor_id == "urgent") == ("low",)


def test_p90_uses_the_slower_expected_runtimes():
    snap = snapshot(
        [node("n1", gpus=8)],
        QUEUE,
        [lq("a", "q")],
        [running("r", "a", [("n1", tuple(range(8)))], started=NOW, runtime=3600)],
        runtimes=(("r", 600.0, 1500.0),),  # history: it usually takes 10 minutes, sometimes 25
    )
    check = DryRun(snap, Policy(), NOW).check(job("new", "a", gpu=8, created=NOW, allowed_gpu_models=("A100-80GB",)))
    assert (check.estimated_start_p50, check.estimated_start_p90) == (NOW + 600, NOW + 1500)


def test_it_suggests_another_gpu_model_that_is_free_now():
    snap = snapshot(
        [node("a1", gpus=8), node("h1", model="H100-80GB", gpus=8)],
        QUEUE,
        [lq("a", "q")],
        [running("r", "a", [("a1", tuple(range(8)))], started=NOW, runtime=3600)],
    )
    dry = DryRun(snap, Policy(), NOW)
    candidate = job("new", "a", gpu=4, created=NOW, allowed_gpu_models=("A100-80GB",))
    check = dry.check(candidate)
    assert check.verdict == WAITS
    suggestions = dry.suggestions(candidate, check, ("A100-80GB", "H100-80GB"))
    assert suggestions[0].change == (("allowed_gpu_models", ("H100-80GB",)),)
    assert suggestions[0].check.verdict == RUNS_NOW


def test_suggestions_count_in_words_one_replica_and_one_gpu():
    snap = snapshot(
        [node("n1", gpus=8)],
        QUEUE,
        [lq("a", "q")],
        [running("r", "a", [("n1", tuple(range(6)))], started=NOW, runtime=3600)],
    )
    dry = DryRun(snap, Policy(), NOW)
    candidate = job("new", "a", gpu=2, replicas=2, created=NOW, allowed_gpu_models=("A100-80GB",))
    check = dry.check(candidate)
    assert check.verdict == WAITS
    messages = {s.message for s in dry.suggestions(candidate, check, ("A100-80GB",))}
    assert {"ask for 1 GPU per replica", "run 1 replica"} <= messages
    assert not any("1 GPUs" in m or "1 replicas" in m for m in messages)


def test_a_job_queued_behind_equal_jobs_starts_after_them_in_the_cycles_order():
    # r ends at +100; w1 (same queue, same shape, older) runs 200 s from then; a lower-priority w2 in
    # another queue comes after the new job. The new job starts at +300, before w2.
    snap = snapshot(
        [node("n1", gpus=8)],
        QUEUE,
        [lq("a", "q"), lq("b", "q")],
        [
            running("r", "a", [("n1", tuple(range(8)))], started=NOW, runtime=100),
            job("w1", "a", gpu=8, created=1, allowed_gpu_models=("A100-80GB",), runtime_s=200),
            job("w2", "b", gpu=8, created=2, allowed_gpu_models=("A100-80GB",), runtime_s=200, priority=-1),
        ],
    )
    dry = DryRun(snap, Policy(), NOW)
    check = dry.check(job("new", "a", gpu=8, created=NOW, allowed_gpu_models=("A100-80GB",), runtime_s=200))
    assert check.position == 2
    assert (check.estimated_start_p50, check.estimated_start_p90) == (NOW + 300, NOW + 300)
    assert pending_info(dry.plan, "w2").estimated_start == NOW + 300  # without the new job


def test_a_job_this_cycle_admits_is_not_ahead_of_the_checked_one():
    # On a snapshot read before the cycle (the scheduler hands its own state to the dry runs), w1 is
    # pending and this cycle admits it: in the state after the cycle the new job is first in its queue.
    snap = snapshot(
        [node("n1", gpus=8)],
        QUEUE,
        [lq("a", "q")],
        [job("w1", "a", gpu=4, created=1, allowed_gpu_models=("A100-80GB",), runtime_s=200)],
    )
    candidate = job("new", "a", gpu=8, created=NOW, allowed_gpu_models=("A100-80GB",), runtime_s=200)
    check = DryRun(snap, Policy(), NOW).check(candidate)
    plan = next_cycle(snap, candidate)
    assert [a.workload_id for a in plan.admissions] == ["w1"]
    assert check.verdict == WAITS
    assert check.position == pending_info(plan, "new").position == 1


def test_a_dry_run_changes_nothing_the_cycle_decides_the_same_afterwards():
    snap = snapshot(
        [node("n1", gpus=8)],
        QUEUE,
        [lq("a", "q")],
        [
            running("r", "a", [("n1", (0, 1, 2, 3))], started=NOW, runtime=100),
            job("w", "a", gpu=8, created=1, allowed_gpu_models=("A100-80GB",)),
        ],
    )
    dry = DryRun(snap, Policy(), NOW)
    first = dry.check(job("x", "a", gpu=2, created=NOW))
    for i in range(3):
        dry.check(job(f"y{i}", "a", gpu=8, created=NOW, allowed_gpu_models=("A100-80GB",)))
    assert dry.check(job("x", "a", gpu=2, created=NOW)) == first
    assert dry.cycle.forecast(dry.cycle.waiting, P50) == dry.cycle.forecasts[P50]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    used=st.lists(st.integers(0, 8), min_size=2, max_size=4),
    waiting=st.lists(st.tuples(st.sampled_from((1, 2, 4, 8)), st.integers(1, 3)), max_size=4),
    gpus=st.sampled_from((1, 2, 4, 8, 16)),
    replicas=st.integers(1, 3),
    priority=st.sampled_from((-1, 0, 1)),
)
def test_the_dry_run_and_the_next_cycle_agree_on_a_snapshot_the_cycle_has_settled(
    used, waiting, gpus, replicas, priority
):
    """On a snapshot where the cycle admits nothing more (its plan applied), the dry run's verdict,
    placements and reason are the next cycle's decision for the job submitted. With binpack: a
    fragmentation-aware policy scores nodes against the pending jobs' mix, which the submitted job
    joins, so its device choice may differ from the kept state's."""
    nodes = [node(f"n{i}", gpus=8) for i in range(len(used))]
    workloads: list[Workload] = [
        running(f"r{i}", "a", [(f"n{i}", tuple(range(u)))], started=NOW - 50, runtime=100.0 * (i + 1))
        for i, u in enumerate(used)
        if u
    ]
    workloads += [
        job(f"w{k}", "a", gpu=g, replicas=r, created=k, allowed_gpu_models=("A100-80GB",))
        for k, (g, r) in enumerate(waiting)
    ]
    snap = snapshot(nodes, [cq("q", {"A100-80GB": 64})], [lq("a", "q")], workloads)
    policy = Policy(placement="binpack", preemption=False)
    settled = run_cycle(snap, policy, NOW)
    if settled.admissions:  # apply the plan: those jobs now run
        admitted = {a.workload_id: a for a in settled.admissions}
        snap = replace(
            snap,
            workloads=tuple(
                replace(w, state="running", gpu_model="A100-80GB", placements=admitted[w.id].placements, started_at=NOW)
                if w.id in admitted
                else w
                for w in snap.workloads
            ),
        )
    candidate = job("new", "a", gpu=gpus, replicas=replicas, priority=priority, created=NOW)
    check = DryRun(snap, policy, NOW).check(candidate)
    plan = next_cycle(snap, candidate, policy)
    admitted = {a.workload_id: a for a in plan.admissions}
    if "new" in admitted:
        assert check.verdict == RUNS_NOW
        assert check.placements == admitted["new"].placements
    else:
        info = pending_info(plan, "new")
        assert check.verdict == (WAITS if info.reason.waits else NEVER)
        assert check.reason == info.reason


# -- jobs submitted after the snapshot was read (step 5) ------------------------------------------

BURST_RUNTIME = 600.0


def burst_job(id: str, created: float, gpu: int = 8, priority: int = 0) -> Workload:
    return job(
        id, "a", gpu=gpu, created=created, priority=priority, runtime_s=BURST_RUNTIME, allowed_gpu_models=("A100-80GB",)
    )


def one_free_node() -> Snapshot:
    return snapshot([node("n1", gpus=8)], QUEUE, [lq("a", "q")], [])


def test_a_burst_is_not_each_told_the_same_free_room():
    # One free 8-GPU node; two 8-GPU jobs were submitted after the snapshot, then a third asks.
    # By hand: the first takes the node now and ends at NOW+600, the second then runs to NOW+1200,
    # so the third waits second in its queue (behind the second) and starts at NOW+1200.
    snap = one_free_node()
    first, second, candidate = (burst_job(i, NOW + k) for k, i in enumerate(("b1", "b2", "new"), start=1))
    dry = DryRun(snap, Policy(), NOW)
    assert dry.check(candidate).verdict == RUNS_NOW  # what it said before: the later jobs unseen
    check = dry.check(candidate, later=[(first, None), (second, None)])
    assert check.verdict == WAITS
    assert check.position == 2
    assert check.estimated_start_p50 == check.estimated_start_p90 == NOW + 2 * BURST_RUNTIME
    # The next cycle with all three submitted says the same.
    plan = run_cycle(replace(snap, workloads=(first, second, candidate)), Policy(), NOW)
    assert [a.workload_id for a in plan.admissions] == ["b1"]
    info = pending_info(plan, "new")
    assert (info.position, info.estimated_start) == (check.position, check.estimated_start_p50)


def test_the_copy_kept_for_a_burst_answers_as_a_fresh_one():
    snap = one_free_node()
    jobs = [burst_job(f"b{k}", NOW + k) for k in range(1, 5)]
    kept = DryRun(snap, Policy(), NOW)
    for n in range(1, 4):  # each submission of the burst sees one more later job
        candidate = burst_job(f"c{n}", NOW + 10 + n)
        later = [(w, None) for w in jobs[:n]]
        assert kept.check(candidate, later=later) == DryRun(snap, Policy(), NOW).check(candidate, later=later)
        assert kept.check(candidate, later=later).estimated_start_p50 == NOW + n * BURST_RUNTIME
    # A later job gone (cancelled, or admitted: a new state) starts a new copy.
    candidate = burst_job("c9", NOW + 20)
    later = [(jobs[1], None)]
    assert kept.check(candidate, later=later) == DryRun(snap, Policy(), NOW).check(candidate, later=later)
    assert kept.check(candidate, later=later).estimated_start_p50 == NOW + BURST_RUNTIME


def test_a_later_job_that_commits_out_of_order_is_decided_on_the_kept_copy():
    # Many clients at once: b3 was seen before b2 (created earlier, committed later). The kept copy
    # goes on (deciding the burst again at every check would cost each submission the whole burst);
    # b2 is decided after b1 and b3. By hand, on one free 8-GPU node: b1 runs now, b3 and b2 wait,
    # so the candidate is third in its queue and starts when all three have run.
    snap = one_free_node()
    b1, b2, b3 = (burst_job(f"b{k}", NOW + k) for k in (1, 2, 3))
    dry = DryRun(snap, Policy(), NOW)
    first = dry.check(burst_job("c1", NOW + 10), later=[(b1, None), (b3, None)])
    assert (first.verdict, first.position, first.estimated_start_p50) == (WAITS, 2, NOW + 2 * BURST_RUNTIME)
    copy = dry._later[0].cycle
    assert copy is not None
    candidate = burst_job("c2", NOW + 11)
    check = dry.check(candidate, later=[(b1, None), (b2, None), (b3, None)])
    assert dry._later[0].cycle is copy  # not decided again from the start
    assert (check.verdict, check.position) == (WAITS, 3)
    assert check.estimated_start_p50 == check.estimated_start_p90 == NOW + 3 * BURST_RUNTIME
    # The same as a fresh state told the jobs in the order this one saw them.
    fresh = DryRun(snap, Policy(), NOW).check(candidate, later=[(b1, None), (b3, None), (b2, None)])
    assert check == fresh
    # One it decided gone (cancelled): a new copy.
    dry.check(candidate, later=[(b2, None), (b3, None)])
    assert dry._later[0].cycle is not copy


def test_a_burst_reuses_the_expected_submissions_and_each_answer_is_a_fresh_dry_runs():
    # The last hour brought a higher-priority 8-GPU job (``recent``): the forecast expects its like at
    # NOW+50, ahead of the burst. Each check of the burst runs the forecast on the kept copy, which
    # makes that period's expected copies once and must see each later job that fits end. A fresh dry
    # run (made and unpickled, as the web processes get it) must say the same, reasons included, and
    # the expected job must move the answer.
    seen = burst_job("seen", NOW - 3600 + 50, priority=5)
    snap = replace(one_free_node(), recent=(seen,))
    policy = Policy(arrival_period_s=3600, arrival_upper_p90=False)
    jobs = [burst_job(f"b{k}", NOW + k, gpu=4) for k in range(1, 5)]  # two fit now: each check, one more holder
    kept = DryRun(snap, policy, NOW)
    for n in range(1, 4):
        candidate = burst_job(f"c{n}", NOW + 10 + n)
        later = [(w, None) for w in jobs[:n]]
        answer = kept.check(candidate, later=later)
        assert answer == pickle.loads(pickle.dumps(DryRun(snap, policy, NOW))).check(candidate, later=later)
        unexpected = DryRun(snap, replace(policy, arrival_period_s=0), NOW).check(candidate, later=later)
        assert answer.estimated_start_p50 == unexpected.estimated_start_p50 + BURST_RUNTIME  # the expected job's turn
    forecast = kept._later[0].cycle._forecast
    assert forecast.expected_copies  # made by the first check of the burst, used by the next
    assert [c.id for c, _, _ in forecast.expected_copies[(1, False)]] == ["seen@1"]
    assert pickle.loads(pickle.dumps(forecast)).expected_copies == {}  # not handed to other processes


def test_a_later_job_of_lower_priority_is_decided_after_it_and_one_that_never_fits_holds_nothing():
    snap = one_free_node()
    low = burst_job("low", NOW + 1, priority=-10)
    huge = burst_job("huge", NOW + 2, gpu=16)  # larger than any node: never fits
    candidate = burst_job("new", NOW + 3)
    check = DryRun(snap, Policy(), NOW).check(candidate, later=[(low, None), (huge, None)])
    assert check.verdict == RUNS_NOW
    assert check.position is None
    plan = run_cycle(replace(snap, workloads=(low, huge, candidate)), Policy(), NOW)
    assert [a.workload_id for a in plan.admissions] == ["new"]


def test_a_later_job_with_its_own_expected_runtime_moves_the_start_by_it():
    snap = one_free_node()
    first, candidate = burst_job("b1", NOW + 1), burst_job("new", NOW + 2)
    check = DryRun(snap, Policy(), NOW).check(candidate, later=[(first, (100.0, 250.0))])
    assert check.verdict == WAITS
    # The first runs 100 s at P50 and 250 s at P90: the candidate starts after it.
    assert (check.estimated_start_p50, check.estimated_start_p90) == (NOW + 100.0, NOW + 250.0)


def test_a_burst_into_a_full_cluster_queues_behind_the_later_jobs_without_copying_the_state():
    # n1 is full until NOW+300; two 8-GPU jobs were submitted since. By hand: they run 300-900 and
    # 900-1500, so the third starts at NOW+1500, third in its queue.
    snap = snapshot(
        [node("n1", gpus=8)],
        QUEUE,
        [lq("a", "q")],
        [running("r", "a", [("n1", tuple(range(8)))], started=NOW - 100, runtime=400)],
    )
    first, second, candidate = (burst_job(i, NOW + k) for k, i in enumerate(("b1", "b2", "new"), start=1))
    dry = DryRun(snap, Policy(), NOW)
    check = dry.check(candidate, later=[(first, None), (second, None)])
    assert (check.verdict, check.position) == (WAITS, 3)
    assert check.estimated_start_p50 == NOW + 300 + 2 * BURST_RUNTIME
    assert all(kept.cycle is None for kept in dry._later.values())  # nothing fitted: no copy made
    plan = run_cycle(replace(snap, workloads=(*snap.workloads, first, second, candidate)), Policy(), NOW)
    info = pending_info(plan, "new")
    assert (info.position, info.estimated_start) == (check.position, check.estimated_start_p50)
