"""Scenario tables for workloads of several pod sets (a Ray cluster: head and worker groups), one gang."""

from __future__ import annotations

from scheduling.engine.codec import snapshot_from_json, snapshot_to_json
from scheduling.engine.cycle import run_cycle
from scheduling.engine.model import PodSet, Policy, ReasonKind, Resources, Workload
from scheduling.engine.standing import queue_standings

from .builders import admitted_ids, apply_plan, cq, job, lq, node, pending_info, running, snapshot

NOW = 1000.0


def ray(id: str, queue: str, *groups: tuple[str, int, int], head_cpu: int = 2000, priority: int = 0) -> Workload:
    """A Ray cluster: a CPU-only head and worker groups ``(name, replicas, GPUs per worker)``."""
    sets = tuple(
        PodSet(name, replicas, Resources(gpu=gpus, cpu_milli=4000, memory_mib=8192)) for name, replicas, gpus in groups
    )
    return job(id, queue, cpu=head_cpu, mem=4096, priority=priority, pod_sets=sets)


def test_a_ray_cluster_is_admitted_whole_head_first_then_each_worker_group():
    snap = snapshot(
        [node("n1", gpus=8), node("n2", gpus=8)],
        [cq("q", {"A100-80GB": 16})],
        [lq("a", "q")],
        [ray("r", "a", ("big", 2, 4), ("small", 2, 2))],
    )
    plan = run_cycle(snap, Policy(placement="binpack"), NOW)
    assert admitted_ids(plan) == ["r"]
    (admission,) = plan.admissions
    # head, then the groups in order: 1 + 2 + 2 pods
    assert [len(p.gpu_indices) for p in admission.placements] == [0, 4, 4, 2, 2]
    assert [p.cpu_milli for p in admission.placements] == [2000, 4000, 4000, 4000, 4000]
    # no device is given twice
    held = [(p.node, d) for p in admission.placements for d in p.gpu_indices]
    assert len(held) == len(set(held)) == 12


def test_nothing_starts_when_one_worker_group_does_not_fit():
    # 12 GPUs free; the head and the first group (8 GPUs) would fit, the second group (6) not.
    snap = snapshot(
        [node("n1", gpus=8), node("n2", gpus=4)],
        [cq("q", {"A100-80GB": 32})],
        [lq("a", "q")],
        [ray("r", "a", ("first", 2, 4), ("second", 3, 2)), job("small", "a", gpu=4, created=1)],
    )
    plan = run_cycle(snap, Policy(), NOW)
    assert "r" not in admitted_ids(plan)
    reason = pending_info(plan, "r").reason
    assert reason.kind == ReasonKind.GANG
    assert "pod set second" in reason.message
    # what the failed gang staged was given back: the later job gets the room
    assert admitted_ids(plan) == ["small"]


def test_the_quota_counts_every_pod_set_and_nothing_starts_beyond_it():
    # 8 GPUs of quota; the workers want 2 x 4 + 1 x 2 = 10
    snap = snapshot(
        [node("n1", gpus=8), node("n2", gpus=8)],
        [cq("q", {"A100-80GB": 8})],
        [lq("a", "q")],
        [ray("r", "a", ("w", 2, 4), ("x", 1, 2))],
    )
    plan = run_cycle(snap, Policy(), NOW)
    assert admitted_ids(plan) == []
    assert pending_info(plan, "r").reason.kind == ReasonKind.QUOTA


def test_a_pod_set_bigger_than_any_node_never_fits_and_says_which():
    snap = snapshot(
        [node("n1", gpus=8)],
        [cq("q", {"A100-80GB": 32})],
        [lq("a", "q")],
        [ray("r", "a", ("huge", 1, 16))],
    )
    plan = run_cycle(snap, Policy(), NOW)
    reason = pending_info(plan, "r").reason
    assert not reason.waits
    assert reason.message.startswith("pod set huge: ")


def test_a_running_ray_cluster_holds_quota_and_devices_of_every_pod():
    snap = snapshot(
        [node("n1", gpus=8)],
        [cq("q", {"A100-80GB": 8})],
        [lq("a", "q")],
        [ray("r", "a", ("w", 3, 2)), job("next", "a", gpu=4, created=5)],
    )
    first = run_cycle(snap, Policy(), NOW)
    assert admitted_ids(first) == ["r"]
    later = apply_plan(snap, first, NOW)
    second = run_cycle(later, Policy(), NOW + 10)
    # 6 GPUs held by the cluster's workers: quota (8) leaves 2, the node 2
    assert admitted_ids(second) == []
    assert pending_info(second, "next").reason.kind in (ReasonKind.QUOTA, ReasonKind.PLACEMENT)


def test_a_high_priority_ray_cluster_preempts_enough_for_all_its_pod_sets():
    snap = snapshot(
        [node("n1", gpus=8)],
        [cq("q", {"A100-80GB": 8})],
        [lq("a", "q")],
        [
            running("low1", "a", [("n1", (0, 1, 2, 3))]),
            running("low2", "a", [("n1", (4, 5, 6, 7))]),
            ray("r", "a", ("w", 2, 2), ("x", 1, 2), priority=10),
        ],
    )
    plan = run_cycle(snap, Policy(), NOW)
    # 6 GPUs needed: one 4-GPU victim is not enough, both go
    assert sorted(p.workload_id for p in plan.preemptions) == ["low1", "low2"]


def test_pod_sets_survive_the_snapshot_codec():
    snap = snapshot([node("n1")], [cq("q", {"A100-80GB": 8})], [lq("a", "q")], [ray("r", "a", ("w", 2, 4))])
    assert snapshot_from_json(snapshot_to_json(snap)) == snap


def test_the_queue_standing_counts_a_pending_ray_clusters_every_worker():
    snap = snapshot([node("n1")], [cq("q", {"A100-80GB": 8})], [lq("a", "q")], [ray("r", "a", ("w", 3, 4))])
    (queue,) = queue_standings(snap).cluster_queues
    gpu = next(r for r in queue.resources if r.key == "gpu/A100-80GB")
    assert gpu.pending == 3 * 4 * 1000  # the workers' GPUs (the head has none), in milli-GPU
