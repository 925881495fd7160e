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

from django.db import connection
from django.db.models import BooleanField, Q, QuerySet
from django.db.models.expressions import RawSQL

from portal.jobs.models import GpuModel, Job, ReplicaPlacement
from portal.jobs.states import JobState
from scheduling.adapters.contract import SPOT, Observation, Reclaim, node_lost_observation, termination_notice
from scheduling.engine.model import ForeignUsage, GpuNode, Taint, labels_of
from scheduling.models import SimNode


class SimulatedCluster:
    name = "simulated"
    # The tables ``nodes()`` reads: while their rows are unchanged (``changes.rows_version``), so are the nodes.
    node_tables = (SimNode, GpuModel)

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
        """Admitted jobs start, due jobs succeed, jobs on a lost node end with it. Reads only those
        jobs, not every running one: the others cannot have news (``_news``)."""
        observations: list[Observation] = []
        live: dict[str, Reclaim | None] = {
            name: termination_notice(name, taints or [])
            for name, taints in SimNode.objects.values_list("name", "taints")
        }
        # The replicas of admitted and running jobs on a node that is gone or announced its end.
        lost_nodes_of: dict[int, list[str]] = {}
        for job_id, node in (
            ReplicaPlacement.objects.filter(job__state__in=OBSERVED_STATES)
            .exclude(node__in=[name for name, notice in live.items() if notice is None])
            .values_list("job_id", "node")
        ):
            lost_nodes_of.setdefault(job_id, []).append(node)
        for job in self._news(now=now, lost=set(lost_nodes_of)):
            done = self.finish_time(job)
            lost = min(lost_nodes_of.get(job.pk, ()), default=None)  # the first by name, as the pods list them
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

    def _news(self, *, now: datetime, lost: set[int]) -> QuerySet[Job]:
        """The admitted and running jobs that may have news at ``now``: every admitted one (it starts),
        those on a lost node, and (PostgreSQL) the running ones due to finish by then; ``observe``
        decides each exactly. The due test in SQL keeps a second of margin over ``finish_time``'s
        arithmetic, so it only ever reads more jobs than that, never fewer. Elsewhere (the SQLite
        demo) every running job is read."""
        jobs = Job.objects.filter(state__in=OBSERVED_STATES).only(
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
        if connection.vendor != "postgresql":
            return jobs
        table = connection.ops.quote_name(Job._meta.db_table)
        due = RawSQL(
            f"COALESCE({table}.started_at, {table}.admitted_at) + {table}.runtime_s * %s * interval '1 second' <= %s",
            (1.0 / self.speedup, now + DUE_MARGIN),
            output_field=BooleanField(),
        )
        return jobs.filter(Q(state=JobState.ADMITTED) | Q(pk__in=sorted(lost)) | Q(due))


OBSERVED_STATES = (JobState.ADMITTED, JobState.RUNNING)
DUE_MARGIN = timedelta(seconds=1)


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
