"""The history replay holds a job's placement from admission to its end and bills from its pods' start."""

from __future__ import annotations

from dataclasses import replace

from scheduling.engine.model import (
    ClusterQueue,
    FlavorQuota,
    GpuNode,
    LocalQueue,
    Policy,
    Resources,
    Snapshot,
    Workload,
)
from scheduling.sim.figures import admission_differences, preemption_differences
from scheduling.sim.history import COMPLETED, PREEMPTED, HistoryJob, replay_history


def _job(job_id: str, created: float) -> Workload:
    return Workload(
        id=job_id,
        local_queue="team",
        team="team",
        priority=0,
        created_at=created,
        resources=Resources(gpu=8, cpu_milli=1000, memory_mib=1000),
        runtime_s=3600,
    )


def test_a_job_holds_its_node_from_admission_and_its_pods_run_after_the_lag():
    # One 8-GPU node; two whole-node jobs. The first holds the node for 100 s from its admission at 0
    # (its pods ran 30 s after admission, then 70 s); the second, submitted at 10, starts when the first
    # ends (100), not 30 s earlier.
    snapshot = Snapshot(
        nodes=(GpuNode("n0", "A100-80GB", 8, 64_000, 512_000, gpu_memory_gib=80),),
        cluster_queues=(ClusterQueue(name="cq", flavors=(FlavorQuota("A100-80GB", 8),)),),
        local_queues=(LocalQueue(name="team", team="team", cluster_queue="cq"),),
        workloads=(),
    )
    jobs = [
        HistoryJob(_job("a", 0.0), arrival_s=0.0, run_s=100.0, start_lag_s=30.0),
        HistoryJob(_job("b", 10.0), arrival_s=10.0, run_s=50.0),
    ]
    run = replay_history(snapshot, jobs, Policy(preemption=False), start_s=0.0, end_s=1000.0)
    by_job = {a.job_id: a for a in run.attempts}
    a, b = by_job["a"], by_job["b"]
    assert (a.admitted_s, a.started_s, a.ended_s, a.outcome) == (0.0, 30.0, 100.0, COMPLETED)
    assert a.run_from_s == 30.0  # GPU-hours count 70 s, as the bill does
    assert (b.admitted_s, b.started_s, b.ended_s) == (100.0, None, 150.0)
    assert [p.node for p in a.placements] == ["n0"]


def _burst(arrival_batch_s: float):
    # One 8-GPU node, 8 nominal GPUs: room for one whole-node job. A low-priority job and, 8 ms later,
    # a high-priority one: a burst, as a notebook submitting two jobs makes.
    snapshot = Snapshot(
        nodes=(GpuNode("n0", "A100-80GB", 8, 64_000, 512_000, gpu_memory_gib=80),),
        cluster_queues=(ClusterQueue(name="cq", flavors=(FlavorQuota("A100-80GB", 8),)),),
        local_queues=(LocalQueue(name="team", team="team", cluster_queue="cq"),),
        workloads=(),
    )
    low = _job("low", 100.0)
    high = replace(_job("high", 100.008), priority=1000)
    jobs = [HistoryJob(low, arrival_s=100.0, run_s=50.0), HistoryJob(high, arrival_s=100.008, run_s=50.0)]
    return replay_history(
        snapshot, jobs, Policy(), start_s=0.0, end_s=1000.0, preempt_delay_s=10.0, arrival_batch_s=arrival_batch_s
    )


def test_a_burst_of_arrivals_shares_one_cycle_as_the_portals_submissions_do():
    # The portal: the first submission asks for a cycle 1 s later, the second shares it; that cycle
    # sees both and admits the higher priority first; the other waits for the node. No preemption.
    run = _burst(arrival_batch_s=1.0)
    assert [(a.job_id, a.admitted_s, a.outcome) for a in run.attempts] == [
        ("high", 101.0, COMPLETED),
        ("low", 151.0, COMPLETED),
    ]
    assert run.cycles == 2
    # A cycle per arrival instead admits the first alone and preempts it 8 ms later.
    per_event = _burst(arrival_batch_s=0.0)
    assert [(a.job_id, a.outcome) for a in per_event.attempts][:2] == [("low", PREEMPTED), ("high", COMPLETED)]


def test_preemption_differences_name_the_jobs_preempted_more_often_on_one_side():
    batched, per_event = _burst(1.0).attempts, _burst(0.0).attempts
    assert admission_differences(batched, batched, tolerance_s=0) == []
    assert preemption_differences(batched, per_event) == [("low", 0, 1)]
    assert preemption_differences(per_event, batched) == [("low", 1, 0)]
    assert preemption_differences(per_event, per_event) == []
