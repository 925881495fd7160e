"""The simulated cluster: the embedded default backend.

Nodes are rows of ``SimNode``. An admitted job starts at once (its pods "run" from the admission
time) and succeeds after ``runtime_s / speedup`` wall seconds. A job whose node is deleted, or
carries a termination notice (a ``SPOT_TERMINATION_TAINTS`` taint, at its ``timeAdded``), is
requeued as the Kubernetes backend requeues it ("interrupted by spot reclaim" on spot capacity).
Everything is derived from the rows, so any number of web and worker processes agree without
shared memory.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from portal.jobs.models import Job, ReplicaPlacement
from portal.jobs.states import ACTIVE_STATES, JobState
from scheduling.adapters.contract import SPOT, Observation, Reclaim, node_lost_observation, termination_notice
from scheduling.engine.model import ForeignUsage, GpuNode, Taint, labels_of
from scheduling.models import SimNode


class SimulatedCluster:
    name = "simulated"

    def __init__(self, *, speedup: float = 60.0) -> None:
        if speedup <= 0:
            raise ValueError("speedup must be positive")
        self.speedup = speedup

    def nodes(self) -> list[GpuNode]:
        # Plain rows, not model instances: the cycle and every submit's never-fits check read all nodes.
        columns = (
            "name", "gpu_model__name", "gpu_model__memory_gib", "gpu_count", "cpu_milli", "memory_mib", "labels",
            "taints", "unschedulable", "mig_enabled",
        )  # fmt: skip
        return [_gpu_node(*row) for row in SimNode.objects.values_list(*columns)]

    def foreign_usage(self) -> list[ForeignUsage]:
        return []

    def start(self, *, job_id: int) -> None:
        """Nothing to create: an admitted job is reported Running from its admission time."""

    def stop(self, *, job_id: int, grace_s: int) -> None:
        """Nothing to delete: a stopped job is no longer observed."""

    def finish_time(self, job: Job) -> datetime:
        """When a job that started at ``started_at`` (or, before it started, its admission) succeeds."""
        started = job.started_at or job.admitted_at
        assert started is not None, "only admitted and running jobs have a finish time"
        return started + timedelta(seconds=job.runtime_s / self.speedup)

    def observe(self, *, now: datetime) -> list[Observation]:
        observations: list[Observation] = []
        active = Job.objects.filter(state__in=[JobState.ADMITTED, JobState.RUNNING]).only(
            "id",
            "attempt",
            "state",
            "admitted_at",
            "started_at",
            "runtime_s",
            "capacity_type",
            "checkpoint_path",
            "restart_policy",
        )
        live: dict[str, Reclaim | None] = {
            name: termination_notice(name, taints or [])
            for name, taints in SimNode.objects.values_list("name", "taints")
        }
        nodes_of: dict[int, list[str]] = {}
        for job_id, node in ReplicaPlacement.objects.filter(job__state__in=ACTIVE_STATES).values_list("job_id", "node"):
            nodes_of.setdefault(job_id, []).append(node)
        for job in active:
            done = self.finish_time(job)
            lost = next((n for n in sorted(nodes_of.get(job.pk, ())) if n not in live or live[n] is not None), None)
            if lost is not None:
                gone = node_lost_observation(
                    job_id=job.pk,
                    attempt=job.attempt,
                    node=lost,
                    notice=live.get(lost),
                    now=now,
                    requeue=job.restart_policy == Job.RestartPolicy.REQUEUE,
                    spot=job.capacity_type == SPOT,
                    resume_hint=job.resume_hint(),
                )
                if gone.at < done:  # it ended with its node, not before
                    observations.append(gone)
                    continue
            if job.state == JobState.ADMITTED and job.admitted_at is not None:
                observations.append(Observation(job.pk, job.attempt, JobState.RUNNING, job.admitted_at, "pods running"))
            if done <= now:
                observations.append(Observation(job.pk, job.attempt, JobState.SUCCEEDED, done, "completed"))
        return observations


def _gpu_node(
    name: str,
    model: str | None,
    memory_gib: int | None,
    gpu_count: int,
    cpu_milli: int,
    memory_mib: int,
    labels: dict,
    taints: list[dict],
    unschedulable: bool,
    mig_enabled: bool,
) -> GpuNode:
    """A ``SimNode`` row's values (``SimulatedCluster.nodes``' columns, in order) as the engine's node."""
    return GpuNode(
        name=name,
        gpu_model=model,
        gpu_count=gpu_count,
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        gpu_memory_gib=(memory_gib or 0) if model is not None else 0,
        labels=labels_of(labels),
        taints=tuple(
            Taint(key=t["key"], value=t.get("value", ""), effect=t.get("effect", "NoSchedule")) for t in taints
        ),
        unschedulable=unschedulable,
        mig_enabled=mig_enabled,
    )
