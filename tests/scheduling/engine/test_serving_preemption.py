"""The serving rule (``Policy.inference_preempts_training``): an inference replica may preempt training
jobs of lower priority in other ClusterQueues; off by default, and never batch jobs or higher priorities."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduling.engine.cycle import run_cycle
from scheduling.engine.model import Policy, ReasonKind

from .builders import cq, job, lq, node, pending_info, running, snapshot

NOW = 10_000.0


def cluster(victim_kind: str, victim_priority: int = 0):  # type: ignore[no-untyped-def]
    """One 8-GPU node held by team b's job; team a's inference replica wants 4 GPUs (quota to spare)."""
    return snapshot(
        [node("n1", gpus=8)],
        [cq("cq-a", {"A100-80GB": 8}), cq("cq-b", {"A100-80GB": 8})],
        [lq("a", "cq-a"), lq("b", "cq-b")],
        [
            running("train", "b", [("n1", tuple(range(8)))], priority=victim_priority, kind=victim_kind),
            job("replica", "a", gpu=4, priority=100, kind="inference"),
        ],
    )


def test_off_by_default_a_replica_waits_for_another_queues_training():
    plan = run_cycle(cluster("training"), Policy(), NOW)
    assert plan.preemptions == ()
    assert pending_info(plan, "replica").reason.kind == ReasonKind.PLACEMENT


def test_when_on_a_replica_preempts_lower_priority_training_in_another_queue():
    plan = run_cycle(cluster("training"), Policy(inference_preempts_training=True), NOW)
    (preemption,) = plan.preemptions
    assert (preemption.workload_id, preemption.preemptor_id) == ("train", "replica")
    assert preemption.reason.startswith("serving: inference replica replica (priority 100) preempts training")


@pytest.mark.parametrize(
    ("kind", "priority"),
    [("", 0), ("ray", 0), ("training", 100), ("training", 500)],
)
def test_it_never_takes_batch_jobs_or_training_of_equal_or_higher_priority(kind, priority):
    plan = run_cycle(cluster(kind, priority), Policy(inference_preempts_training=True), NOW)
    assert plan.preemptions == ()


def test_a_training_job_cannot_use_the_rule():
    snap = cluster("training")
    workloads = tuple(replace(w, kind="training") if w.id == "replica" else w for w in snap.workloads)
    plan = run_cycle(replace(snap, workloads=workloads), Policy(inference_preempts_training=True), NOW)
    assert plan.preemptions == ()
