"""Scenario tables for the basic admission rules: order, quota, gangs, fractions, fit, reasons."""

from __future__ import annotations

import pytest

from scheduling.engine.cycle import _Cycle, run_cycle
from scheduling.engine.estimate import P50, P90
from scheduling.engine.model import Policy, ReasonKind

from .builders import admitted_ids, cq, job, lq, node, pending_info, reason_of, running, snapshot

NOW = 1000.0


def test_it_admits_by_priority_then_fifo_then_id():
    snap = snapshot(
        [node("n1", gpus=2)],
        [cq("q", {"A100-80GB": 8})],
        [lq("a", "q")],
        [
            job("late-high", "a", gpu=1, priority=10, created=5),
            job("early-low", "a", gpu=1, priority=0, created=1),
            job("b-same", "a", gpu=1, priority=10, created=5),
        ],
    )
    plan = run_cycle(snap, Policy(), NOW)
    assert admitted_ids(plan) == ["b-same", "late-high"]
    assert pending_info(plan, "early-low").reason.kind == ReasonKind.PLACEMENT


@pytest.mark.parametrize(
    ("nominal", "requests", "admitted"),
    [
        (4, [4], ["j0"]),
        (4, [3, 2], ["j0"]),
        (4, [2, 2, 1], ["j0", "j1"]),
        (0, [1], []),
    ],
)
def test_it_enforces_nominal_quota_without_a_cohort(nominal, requests, admitted):
    snap = snapshot(
        [node("n1"), node("n2")],
        [cq("q", {"A100-80GB": nominal})],
        [lq("a", "q")],
        [job(f"j{i}", "a", gpu=g, created=i) for i, g in enumerate(requests)],
    )
    assert admitted_ids(run_cycle(snap, Policy(), NOW)) == admitted


def test_quota_reason_has_the_numbers():
    snap = snapshot(
        [node("n1")],
        [
            cq("vision-q", {"A100-80GB": 8}, cohort="research"),
            cq("other", {"A100-80GB": 0}, cohort="research"),
        ],
        [lq("vision", "vision-q")],
        [running("r", "vision", [("n1", tuple(range(8)))]), job("j", "vision", gpu=1)],
    )
    plan = run_cycle(snap, Policy(), NOW)
    info = pending_info(plan, "j")
    assert info.reason.kind == ReasonKind.QUOTA
    assert info.reason.message == (
        "quota: queue vision-q uses 8 of 8 A100-80GB GPUs and needs 1 more; cohort research has 0 borrowable"
    )
    assert info.position == 1


def test_it_places_a_gang_all_or_nothing():
    snap = snapshot(
        [node("n1", gpus=4), node("n2", gpus=4), node("n3", gpus=4)],
        [cq("q", {"A100-80GB": 100})],
        [lq("a", "q")],
        [
            running("r", "a", [("n3", (0, 1))], priority=1),
            job("gang", "a", gpu=3, replicas=3),
            job("small", "a", gpu=1, created=1),
        ],
    )
    plan = run_cycle(snap, Policy(), NOW)
    assert admitted_ids(plan) == ["small"]
    reason = pending_info(plan, "gang").reason
    assert reason.kind == ReasonKind.GANG
    assert reason.message.startswith("gang: only 2 of 3 replicas fit")
    assert reason.waits  # n3's two GPUs come back when r ends


def test_a_gang_bigger_than_all_its_nodes_never_fits():
    snap = snapshot(
        [node("n1", gpus=4), node("n2", gpus=4)],
        [cq("q", {"A100-80GB": 100})],
        [lq("a", "q")],
        [job("gang", "a", gpu=3, replicas=3)],
    )
    reason = pending_info(run_cycle(snap, Policy(), NOW), "gang").reason
    assert (reason.kind, reason.waits) == (ReasonKind.GANG, False)
    assert reason.message == (
        "gang: never fits as configured: all 3 replicas must start together and the 2 A100-80GB nodes that could "
        "run one hold at most 2 of them with nothing else running"
    )


def test_fractions_share_a_device_and_whole_gpus_need_free_devices():
    snap = snapshot(
        [node("n1", gpus=1)],
        [cq("q", {"A100-80GB": 10})],
        [lq("a", "q")],
        [
            job("half1", "a", milli=500),
            job("half2", "a", milli=500, created=1),
            job("whole", "a", gpu=1, created=2),
        ],
    )
    plan = run_cycle(snap, Policy(), NOW)
    assert admitted_ids(plan) == ["half1", "half2"]
    assert {a.placements[0].gpu_indices for a in plan.admissions} == {(0,)}
    assert reason_of(plan, "whole") == (
        "placement: 0 of 1 nodes fit: 1 too few free GPUs; needs 1 free A100-80GB GPU on one node; "
        "eligible nodes have at most 0 free each and 0 in all (capacity in use)"
    )


def test_capacity_comes_from_running_placements_and_foreign_pods():
    from scheduling.engine.model import ForeignUsage

    snap = snapshot(
        [node("n1", gpus=2)],
        [cq("q", {"A100-80GB": 10})],
        [lq("a", "q")],
        [running("r", "a", [("n1", (0,))]), job("j", "a", gpu=1)],
        foreign=(ForeignUsage("n1", (1,), 1000),),
    )
    plan = run_cycle(snap, Policy(), NOW)
    assert admitted_ids(plan) == []
    assert pending_info(plan, "j").reason.kind == ReasonKind.PLACEMENT


def test_cpu_and_memory_must_fit():
    snap = snapshot(
        [node("n1", cpu=10_000, mem=16_384)],
        [cq("q", {"A100-80GB": 10})],
        [lq("a", "q")],
        [
            running("r", "a", [("n1", (0,))], cpu=4000, mem=8192),
            job("cpu-hog", "a", gpu=1, cpu=8000),
            job("mem-hog", "a", gpu=1, mem=10_000, created=1),
        ],
    )
    # Without reservations (cpu-hog's would hold the free CPU from mem-hog: test_reservations).
    plan = run_cycle(snap, Policy(reserved_jobs=0), NOW)
    assert reason_of(plan, "cpu-hog") == (
        "placement: 0 of 1 nodes fit: 1 not enough CPU; needs 8 free CPU cores on one node; "
        "eligible nodes have at most 6 free each and 6 in all (capacity in use)"
    )
    assert reason_of(plan, "mem-hog") == (
        "placement: 0 of 1 nodes fit: 1 not enough memory; needs 9.766 GiB free memory on one node; "
        "eligible nodes have at most 8 GiB free each and 8 GiB in all (capacity in use)"
    )


def test_a_replica_needing_more_cpu_or_memory_than_any_node_has_never_fits():
    snap = snapshot(
        [node("n1", cpu=4000, mem=8192), node("n2", cpu=6000, mem=4096)],
        [cq("q", {"A100-80GB": 10})],
        [lq("a", "q")],
        [
            job("cpu-hog", "a", gpu=1, cpu=8000),
            job("mem-hog", "a", gpu=1, mem=10_240, created=1),
            job("both", "a", gpu=1, cpu=5000, mem=6144, created=2),
        ],
    )
    plan = run_cycle(snap, Policy(), NOW)
    assert reason_of(plan, "cpu-hog") == (
        "placement: never fits as configured: one replica needs 8 CPU cores and the largest A100-80GB node has 6"
    )
    assert reason_of(plan, "mem-hog") == (
        "placement: never fits as configured: one replica needs 10 GiB memory and the largest A100-80GB node has 8"
    )
    assert reason_of(plan, "both") == (
        "placement: never fits as configured: one replica needs 1 A100-80GB GPU, 5 CPU cores, 6 GiB memory on one "
        "node and no A100-80GB node has all of them"
    )


def test_every_pending_job_gets_a_reason_and_position():
    snap = snapshot(
        [node("n1", gpus=1)],
        [cq("q", {"A100-80GB": 10})],
        [lq("a", "q")],
        [job(f"j{i}", "a", gpu=1, created=i) for i in range(4)],
    )
    plan = run_cycle(snap, Policy(), NOW)
    assert admitted_ids(plan) == ["j0"]
    assert [(p.workload_id, p.position) for p in plan.pending] == [("j1", 1), ("j2", 2), ("j3", 3)]
    assert all(p.reason.message for p in plan.pending)


@pytest.mark.parametrize("enabled", [True, False])
def test_a_cycle_runs_with_the_garbage_collector_paused_and_leaves_it_as_it_found_it(enabled):
    import gc

    from scheduling.engine import cycle

    seen = []
    decide = cycle._Cycle._decide

    def watching(self, job, borrow):
        seen.append(gc.isenabled())
        return decide(self, job, borrow)

    snap = snapshot([node("n1")], [cq("q", {"A100-80GB": 8})], [lq("a", "q")], [job("j", "a", gpu=1)])
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    cycle._Cycle._decide = watching  # type: ignore[method-assign]
    try:
        plan = run_cycle(snap, Policy(), 0.0)
        after = gc.isenabled()
    finally:
        cycle._Cycle._decide = decide  # type: ignore[method-assign]
        (gc.enable if was else gc.disable)()
    assert admitted_ids(plan) == ["j"]
    assert seen
    assert not any(seen)
    assert after == enabled


def _forecast_world(runtimes: tuple[tuple[str, float, float], ...]):  # type: ignore[no-untyped-def]
    # One 2-GPU node held by two running jobs; three jobs wait for it.
    return snapshot(
        [node("n1", gpus=2)],
        [cq("q", {"A100-80GB": 8})],
        [lq("a", "q")],
        [
            running("r0", "a", [("n1", (0,))], started=NOW - 100, runtime=400),
            running("r1", "a", [("n1", (1,))], started=NOW - 100, runtime=900),
            job("big", "a", gpu=2, runtime_s=300, created=1),
            job("small", "a", gpu=1, runtime_s=60, created=2),
            job("later", "a", gpu=1, runtime_s=60, created=3),
        ],
        runtimes=runtimes,
    )


@pytest.mark.parametrize(
    "runtimes",
    [(), (("r0", 500.0, 500.0), ("small", 120.0, 120.0))],
    ids=["requested runtimes", "history without spread"],
)
def test_without_a_runtime_spread_the_p90_forecast_is_the_p50_one_and_runs_once(runtimes, monkeypatch):
    calls = []
    forecast = _Cycle.forecast

    def counted(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(args[1])
        return forecast(self, *args, **kwargs)

    monkeypatch.setattr(_Cycle, "forecast", counted)
    cycle = _Cycle(_forecast_world(runtimes), Policy(), NOW)
    plan = cycle.run()
    assert calls == [P50]
    # What the P90 run would have said, run now on the same final state.
    p90 = forecast(cycle, cycle.waiting, P90)
    assert {wid: (s.at, s.placements) for wid, s in p90.items()} == {
        wid: (s.at, s.placements) for wid, s in cycle.forecasts[P90].items()
    }
    for info in plan.pending:
        assert info.estimated_start_p90 == info.estimated_start


def test_with_a_runtime_spread_the_p90_forecast_runs_on_the_p90_runtimes():
    # r0 ends at +300 (P50) or +800 (P90), r1 at +800. P50: "small" takes r0's GPU at +300 ("big", first
    # in the queue, needs both). P90: both end at +800, "big" takes both GPUs until +1100, then "small".
    plan = run_cycle(_forecast_world((("r0", 400.0, 900.0), ("r1", 900.0, 900.0))), Policy(), NOW)
    small = pending_info(plan, "small")
    assert (small.estimated_start, small.estimated_start_p90) == (NOW + 300, NOW + 1100)


def test_the_borrowing_pass_asks_each_job_against_its_queues_usage_as_it_is_then():
    # ``_Cycle._borrows`` keeps its answer per decision key while the queue's usage stays as it was:
    # every answer must still be the rule (its queue's A100 use plus the job's 2 GPUs above the nominal
    # 4), for two jobs of one key and as the usage goes up and back down.
    snap = snapshot(
        [node("n1"), node("n2")],
        [cq("qa", {"A100-80GB": 4}, cohort="c"), cq("qb", {"A100-80GB": 4}, cohort="c")],
        [lq("a", "qa"), lq("b", "qb")],
        [],
    )
    cycle = _Cycle(snap, Policy(), 0.0)
    cycle._load_running()
    one, same, other = job("one", "a", gpu=2), job("same", "a", gpu=2), job("other", "b", gpu=2)
    unit = job("unit", "a", gpu=1)
    gpu = cycle._request(cycle.placer.shape_for(unit, "A100-80GB"), 1)  # one whole A100, as quota counts it
    used = 0
    for sign in (1, 1, 1, 1, -1, -1, -1, -1):
        assert cycle._borrows(one) is (used + 2 > 4)
        assert cycle._borrows(same) is (used + 2 > 4)
        assert cycle._borrows(other) is False  # its own queue uses nothing
        cycle.quota.add("qa", gpu, sign)
        used += sign
    assert cycle._borrows(one) is False
