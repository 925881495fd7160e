"""Small builders so scenario tables read like the cluster they describe."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from scheduling.engine.model import (
    ClusterQueue,
    FlavorQuota,
    GpuNode,
    LocalQueue,
    Plan,
    ReplicaPlacement,
    Resources,
    Snapshot,
    Taint,
    Workload,
    WorkloadState,
    labels_of,
)

RACK = "topology.kubernetes.io/rack"
ZONE = "topology.kubernetes.io/zone"


def node(
    name: str,
    model: str | None = "A100-80GB",
    gpus: int = 8,
    *,
    cpu: int = 64_000,
    mem: int = 512_000,
    labels: dict[str, str] | None = None,
    taints: tuple[Taint, ...] = (),
    cordoned: bool = False,
    mig: bool = False,
    gpu_memory_gib: int = 0,
) -> GpuNode:
    return GpuNode(
        name=name,
        gpu_model=model,
        gpu_count=gpus if model else 0,
        cpu_milli=cpu,
        memory_mib=mem,
        gpu_memory_gib=gpu_memory_gib,
        labels=labels_of(labels),
        taints=taints,
        unschedulable=cordoned,
        mig_enabled=mig,
    )


def cq(
    name: str, quota: Mapping[str, int | tuple[int | None, ...]] | None = None, *, cohort: str = "", **kwargs: object
) -> ClusterQueue:
    """A ClusterQueue; ``quota`` maps a GPU model to its nominal GPUs, or to (nominal, borrowing limit,
    lending limit) (a shorter tuple leaves the rest unlimited)."""
    flavors = tuple(
        FlavorQuota(model, n) if isinstance(n, int) else FlavorQuota(model, *n)  # type: ignore[arg-type]
        for model, n in (quota or {}).items()
    )
    return ClusterQueue(name=name, cohort=cohort, flavors=flavors, **kwargs)  # type: ignore[arg-type]


def lq(name: str, cluster_queue: str, *, team: str | None = None, **kwargs: object) -> LocalQueue:
    return LocalQueue(name=name, team=team or name, cluster_queue=cluster_queue, **kwargs)  # type: ignore[arg-type]


def job(
    id: str,
    queue: str,
    *,
    gpu: int = 0,
    milli: int = 0,
    mig: str | None = None,
    gpu_mem: int = 0,
    cpu: int = 1000,
    mem: int = 1024,
    priority: int = 0,
    created: float = 0.0,
    replicas: int = 1,
    team: str | None = None,
    **kwargs: object,
) -> Workload:
    return Workload(
        id=id,
        local_queue=queue,
        team=team or queue,
        priority=priority,
        created_at=created,
        resources=Resources(
            gpu=gpu, gpu_milli=milli, mig_profile=mig, gpu_memory_gib=gpu_mem, cpu_milli=cpu, memory_mib=mem
        ),
        replicas=replicas,
        **kwargs,  # type: ignore[arg-type]
    )


def running(
    id: str,
    queue: str,
    placements: list[tuple[str, tuple[int, ...]]],
    *,
    gpu_milli: int = 1000,
    model: str = "A100-80GB",
    priority: int = 0,
    started: float = 0.0,
    runtime: float = 3600.0,
    cpu: int = 1000,
    mem: int = 1024,
    **kwargs: object,
) -> Workload:
    per_replica = len(placements[0][1]) if placements else 0
    resources = (
        Resources(gpu=per_replica, cpu_milli=cpu, memory_mib=mem)
        if gpu_milli == 1000
        else Resources(gpu_milli=gpu_milli, cpu_milli=cpu, memory_mib=mem)
    )
    return Workload(
        id=id,
        local_queue=queue,
        team=kwargs.pop("team", queue),  # type: ignore[arg-type]
        priority=priority,
        created_at=started,
        resources=resources,
        replicas=len(placements),
        state=WorkloadState.RUNNING,
        gpu_model=model,
        placements=tuple(
            ReplicaPlacement(node=n, gpu_indices=d, gpu_milli=gpu_milli, cpu_milli=cpu, memory_mib=mem)
            for n, d in placements
        ),
        started_at=started,
        runtime_s=runtime,
        **kwargs,  # type: ignore[arg-type]
    )


def snapshot(nodes, cluster_queues, local_queues, workloads, **kwargs) -> Snapshot:  # type: ignore[no-untyped-def]
    return Snapshot(tuple(nodes), tuple(cluster_queues), tuple(local_queues), tuple(workloads), **kwargs)


def admitted_ids(plan: Plan) -> list[str]:
    return sorted(a.workload_id for a in plan.admissions)


def reason_of(plan: Plan, workload_id: str) -> str:
    for p in plan.pending:
        if p.workload_id == workload_id:
            return p.reason.message
    raise AssertionError(f"{workload_id} is not pending in the plan")


def pending_info(plan: Plan, workload_id: str):  # type: ignore[no-untyped-def]
    for p in plan.pending:
        if p.workload_id == workload_id:
            return p
    raise AssertionError(f"{workload_id} is not pending in the plan")


def apply_plan(snap: Snapshot, plan: Plan, now: float) -> Snapshot:
    """What the adapters do between cycles: admitted jobs run, victims go back to pending."""
    from dataclasses import replace

    admitted = {a.workload_id: a for a in plan.admissions}
    victims = {p.workload_id for p in plan.preemptions}
    workloads = []
    for w in snap.workloads:
        if w.id in admitted:
            a = admitted[w.id]
            w = replace(w, state=WorkloadState.RUNNING, gpu_model=a.gpu_model, placements=a.placements, started_at=now)
        elif w.id in victims:
            w = replace(w, state=WorkloadState.PENDING, gpu_model=None, placements=(), started_at=None)
        workloads.append(w)
    return replace(snap, workloads=tuple(workloads))


def largest_expected_again(snap: Snapshot, submitted: int, now: float) -> Snapshot:
    """``snap`` whose forecast expects ``submitted`` submissions early in the next hour: its largest
    pending jobs again, as if submitted in the first ten minutes of the last hour before ``now``."""
    pending = [w for w in snap.workloads if w.state == WorkloadState.PENDING]
    largest = sorted(pending, key=lambda w: (-(w.resources.gpu * w.replicas), w.id))
    recent = tuple(
        replace(w, id=f"recent-{i}", created_at=now - 3600 + 600 * (i + 1) / (submitted + 1))
        for i, w in enumerate(largest[:submitted])
    )
    return replace(snap, recent=recent)
