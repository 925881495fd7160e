"""Job history rows as the history replay's values (``scheduling.sim.history``).

A window ``[start, end]`` takes every job alive in it: submitted before its end and not finished
before its start. Per job, from its attempts (``JobAttempt``: queued, admitted, started, ended):

- running at the start (an attempt admitted before ``start`` and not ended by it): it starts the
  replay on that attempt's recorded placements and ends at that attempt's end;
- otherwise it arrives when the wait that led to its first admission in the window began (its
  submission, or the end of the attempt it was requeued after), or at its submission if it was never
  admitted; its demand is how long its last attempt (the one that ended it, or still runs) held its
  placement, from admission to end, and its pods ran that attempt's lag after admission; a job
  that never ran and was finished (cancelled) leaves the queue then.

The recorded side is the same attempts as ``Attempt`` values, and the jobs that were waiting at the
window's end with the time their wait began.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import datetime

from django.db.models import Q

from portal.jobs.models import GpuModel, Job, JobAttempt
from portal.jobs.states import JobState
from scheduling.adapters.contract import ClusterView
from scheduling.adapters.orm import pools_load, queues_load, toleration_grants_load
from scheduling.adapters.workloads import jobs_rules, workload_from_job
from scheduling.engine import model as m
from scheduling.sim.history import COMPLETED, PREEMPTED, RUNNING, Attempt, HistoryJob


@dataclass(frozen=True, slots=True)
class History:
    jobs: tuple[HistoryJob, ...]
    recorded: tuple[Attempt, ...]
    waiting: tuple[tuple[str, str, float], ...]  # (job id, team, wait began) at the window's end


def _placement(record: dict) -> m.ReplicaPlacement:
    return m.ReplicaPlacement(
        node=record["node"],
        gpu_indices=tuple(record.get("gpu_indices") or ()),
        gpu_milli=int(record.get("gpu_milli") or 0),
        mig_profile=record.get("mig_profile") or None,
        mig_slot=record.get("mig_slot"),
        cpu_milli=int(record.get("cpu_milli") or 0),
        memory_mib=int(record.get("memory_mib") or 0),
    )


def _outcome(attempt: JobAttempt) -> str:
    if attempt.ended_at is None:
        return RUNNING
    if attempt.outcome == JobState.PREEMPTED or attempt.requeued:
        return PREEMPTED
    return COMPLETED


def attempt_value(attempt: JobAttempt, team: str, *, end: datetime) -> Attempt:
    """A recorded attempt, cut at ``end``: one that ended after the window is still running in it."""
    ended = attempt.ended_at if attempt.ended_at is not None and attempt.ended_at <= end else None
    return Attempt(
        job_id=str(attempt.job_id),
        team=team,
        queued_s=attempt.queued_at.timestamp(),
        admitted_s=attempt.admitted_at.timestamp(),
        ended_s=ended.timestamp() if ended else None,
        gpu_model=attempt.gpu_model,
        gpu_share_7000ths=attempt.gpu_share_7000ths,
        outcome=_outcome(attempt) if ended else RUNNING,
        nodes=tuple(attempt.nodes or ()),
        borrowed=attempt.borrowed,
        capacity_type=attempt.capacity_type,
        # A run that never started is no run at all: it holds nothing the bill counts.
        started_s=(attempt.started_at or attempt.ended_at or end).timestamp(),
    )


def history_load(*, start: datetime, end: datetime) -> History:
    """Every job alive in ``[start, end]`` as replay input, and what really happened to them."""
    jobs = list(
        Job.objects.filter(created_at__lte=end)
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gte=start))
        .defer("command", "labels", "image", "message", "pending_reason")
        .select_related("team", "local_queue__team", "priority_class", "gpu_model")
        .prefetch_related("allowed_gpu_models")
        .order_by("id")
    )
    attempts: dict[int, list[JobAttempt]] = defaultdict(list)
    for attempt in JobAttempt.objects.filter(job__in=[j.pk for j in jobs], admitted_at__lte=end).order_by(
        "job_id", "number"
    ):
        attempts[attempt.job_id].append(attempt)
    rules = jobs_rules(jobs)
    history_jobs: list[HistoryJob] = []
    recorded: list[Attempt] = []
    waiting: list[tuple[str, str, float]] = []
    for job in jobs:
        team = job.team.slug
        job.state = JobState.PENDING  # in memory only: the workload as it was while it waited
        pending = replace(
            workload_from_job(job, [], rules[job.pk]),
            state=m.WorkloadState.PENDING,
            gpu_model=None,
            placements=(),
            started_at=None,
        )
        mine = attempts.get(job.pk, [])
        in_window = [a for a in mine if a.ended_at is None or a.ended_at >= start]
        recorded.extend(attempt_value(a, team, end=end) for a in in_window)
        last = mine[-1] if mine else None
        if last is not None and last.admitted_at <= end and (last.ended_at is None or last.ended_at > end):
            pass  # running at the end
        elif last is None or last.requeued:
            began = last.ended_at if last is not None and last.ended_at is not None else job.created_at
            if job.finished_at is None or job.finished_at > end:
                waiting.append((str(job.pk), team, began.timestamp()))
        demand = _demand(job, mine)
        first = in_window[0] if in_window else None
        if first is not None and first.admitted_at < start:
            running = replace(
                pending,
                state=m.WorkloadState.RUNNING,
                gpu_model=first.gpu_model or None,
                placements=tuple(_placement(p) for p in first.placements),
                started_at=(first.started_at or first.admitted_at).timestamp(),
            )
            ends = first.ended_at.timestamp() if first.ended_at else None
            history_jobs.append(
                HistoryJob(
                    pending,
                    first.queued_at.timestamp(),
                    demand,
                    running=running,
                    ends_s=ends,
                    start_lag_s=_start_lag(mine),
                )
            )
            continue
        arrival = (first.queued_at if first is not None else job.created_at).timestamp()
        never_ran = not mine
        leave = job.finished_at.timestamp() if never_ran and job.finished_at is not None else None
        history_jobs.append(HistoryJob(pending, arrival, demand, leave_s=leave, start_lag_s=_start_lag(mine)))
    return History(tuple(history_jobs), tuple(recorded), tuple(waiting))


def _demand(job: Job, attempts: list[JobAttempt]) -> float | None:
    """How long the job holds its placement: its last attempt's admission to end (quota and devices are
    held from admission, before the pods run); None while it still runs (to the end)."""
    if not attempts:
        return None
    last = attempts[-1]
    if last.ended_at is None:
        return None
    return max(0.0, (last.ended_at - last.admitted_at).total_seconds())


def _start_lag(attempts: list[JobAttempt]) -> float:
    """How long after its last admission the job's pods ran (0 when they never did)."""
    last = attempts[-1] if attempts else None
    if last is None or last.started_at is None:
        return 0.0
    return max(0.0, (last.started_at - last.admitted_at).total_seconds())


def base_snapshot_load(*, backend: ClusterView) -> m.Snapshot:
    """Today's nodes, queues, pools, MIG and memory tables and toleration grants, without jobs: what
    a replay runs the window's jobs on."""
    cluster_queues, local_queues = queues_load()
    gpu_models = list(GpuModel.objects.all())
    return m.Snapshot(
        nodes=tuple(backend.nodes()),
        cluster_queues=cluster_queues,
        local_queues=local_queues,
        workloads=(),
        foreign=tuple(backend.foreign_usage()),
        mig_profiles=tuple((g.name, tuple(g.mig_profiles or ())) for g in gpu_models),
        gpu_memory_gib=tuple((g.name, g.memory_gib) for g in gpu_models),
        pools=pools_load(),
        toleration_grants=toleration_grants_load(),
    )
