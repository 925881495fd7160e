"""The pods of each active job attempt → job state changes. Pure: no ``kubernetes``, no Django.

``job_observations`` reads the pods of each admitted or running attempt (pods of other attempts say
nothing about it) and reports, always at the cluster's own times, the first of:

1. a disruption (``_disruption``): a replica evicted, rejected by its node, lost with its node, or
   gone from a running job → requeued (Pending) or Failed by the job's restart policy;
2. a failure (``_failure``): a replica exited non-zero → Failed at its finish time;
3. progress (``_progress``): the gang running → Running at the latest start; every replica
   succeeded → Succeeded at the latest finish (Running first if never seen running).

An admitted job without pods is not news: its pods are still being created (reconcile does it).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from portal.jobs.states import JobState
from scheduling.adapters.contract import Observation, Reclaim, node_lost_observation
from scheduling.adapters.k8s.pods import object_meta, pod_job_attempt, pod_phase

# Pod-level failure reasons that mean the cluster took the pod away, not that the program failed.
DISRUPTION_REASONS = frozenset(
    {"Evicted", "NodeLost", "Preempting", "Shutdown", "NodeShutdown", "Terminated", "UnexpectedAdmissionError"}
)


@dataclass(frozen=True, slots=True)
class ActiveJob:
    """An admitted or running job attempt as the observer needs it."""

    job_id: int
    attempt: int
    state: str  # Admitted or Running
    replicas: int  # pods the attempt has (its placements)
    gang_size: int
    requeue: bool  # restart policy: requeue when evicted
    spot: bool = False  # admitted on spot capacity: a lost node is a spot reclaim, always requeued
    resume_hint: str = ""  # "; resume from checkpoint ..." for a job with a checkpoint path


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _container_times(pod: Mapping, key: str) -> list[datetime]:
    out = []
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        for state in ("running", "terminated"):
            stamp = parse_time(((status.get("state") or {}).get(state) or {}).get(key))
            if stamp:
                out.append(stamp)
    return out


def pod_started_at(pod: Mapping) -> datetime | None:
    times = _container_times(pod, "startedAt")
    return max(times) if times else parse_time((pod.get("status") or {}).get("startTime"))


def pod_finished_at(pod: Mapping) -> datetime | None:
    times = _container_times(pod, "finishedAt")
    if times:
        return max(times)
    stamps = [
        parse_time(c.get("lastTransitionTime"))
        for c in (pod.get("status") or {}).get("conditions") or []
        if c.get("lastTransitionTime")
    ]
    known = [s for s in stamps if s is not None]
    return max(known) if known else None


def pod_disrupted(pod: Mapping) -> str:
    """Why the cluster (not the program) ended the pod, or "" if it did not."""
    status = pod.get("status") or {}
    if status.get("reason") in DISRUPTION_REASONS:
        return status["reason"]
    for condition in status.get("conditions") or []:
        if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
            return condition.get("reason") or "DisruptionTarget"
    if pod_phase(pod) == "Failed" and not any(
        (s.get("state") or {}).get("terminated") for s in status.get("containerStatuses") or []
    ):
        return status.get("reason") or "rejected by the node"
    return ""


def _exit_text(pod: Mapping) -> str:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated") or {}
        if terminated.get("exitCode"):
            return f"exit code {terminated['exitCode']} ({terminated.get('reason') or 'Error'})"
    return (pod.get("status") or {}).get("reason") or "failed"


def job_observations(
    jobs: Iterable[ActiveJob],
    pods: Iterable[Mapping],
    node_names: set[str],
    *,
    now: datetime,
    reclaims: Mapping[str, Reclaim] | None = None,
) -> list[Observation]:
    """What the pods of each active job attempt say happened, with the cluster's timestamps.

    - a replica evicted, rejected by its node, lost with its node, or gone from a running job:
      requeued (Pending) or Failed by the job's restart policy; a node with a termination notice
      (``reclaims``) is lost from the notice's time on, and a spot job that loses its node is
      requeued whatever its restart policy ("interrupted by spot reclaim");
    - a replica that exited non-zero: Failed at its finish time;
    - the gang running: Running at the latest start among the pods;
    - every replica succeeded: Succeeded at the latest finish (Running first if never seen running).

    An admitted job without pods is not news: its pods are still being created (reconcile does it).
    """
    by_attempt: dict[tuple[int, int], list[Mapping]] = defaultdict(list)
    for pod in pods:
        key = pod_job_attempt(pod)
        if key is not None:
            by_attempt[key].append(pod)
    observations: list[Observation] = []
    for job in jobs:
        mine = sorted(by_attempt.get((job.job_id, job.attempt), []), key=lambda p: object_meta(p).get("name", ""))
        if job.state == JobState.ADMITTED and not mine:
            continue
        # 1. a disruption
        disruption = _disruption(job, mine, node_names, now=now, reclaims=reclaims or {})
        if disruption is not None:
            observations.append(disruption)
            continue
        # 2. a failure
        failed = [p for p in mine if pod_phase(p) == "Failed"]
        if failed:
            observations.append(_failure(job, failed, now=now))
            continue
        # 3. progress
        observations.extend(_progress(job, mine, now=now))
    return observations


def _disruption(
    job: ActiveJob, mine: Sequence[Mapping], node_names: set[str], *, now: datetime, reclaims: Mapping[str, Reclaim]
) -> Observation | None:
    """Step 1: the cluster took a replica away; the job is requeued or failed by its restart policy."""
    lost = [
        p
        for p in mine
        if p["spec"].get("nodeName")
        and (p["spec"]["nodeName"] not in node_names or p["spec"]["nodeName"] in reclaims)
        and pod_phase(p) not in ("Succeeded", "Failed")
    ]
    if lost:
        return _node_lost(job, lost[0]["spec"]["nodeName"], now=now, reclaims=reclaims)
    missing = job.state == JobState.RUNNING and len(mine) < job.replicas
    disrupted = [p for p in mine if pod_phase(p) == "Failed" and pod_disrupted(p)]
    if not (missing or disrupted):
        return None
    if disrupted:
        why = f"pod {object_meta(disrupted[0]).get('name')} {pod_disrupted(disrupted[0])}"
    else:
        why = f"{job.replicas - len(mine)} of {job.replicas} pods gone"
    stamps = [t for t in (pod_finished_at(p) for p in disrupted) if t]
    at = max(stamps) if stamps else now
    target = JobState.PENDING if job.requeue else JobState.FAILED
    verb = "requeued" if job.requeue else "failed"
    return Observation(job.job_id, job.attempt, target, at, f"{verb}: {why}")


def _node_lost(job: ActiveJob, node: str, *, now: datetime, reclaims: Mapping[str, Reclaim]) -> Observation:
    return node_lost_observation(
        job_id=job.job_id,
        attempt=job.attempt,
        node=node,
        notice=reclaims.get(node),
        now=now,
        requeue=job.requeue,
        spot=job.spot,
        resume_hint=job.resume_hint,
    )


def _failure(job: ActiveJob, failed: Sequence[Mapping], *, now: datetime) -> Observation:
    """Step 2: a replica's program failed; the job fails at the latest finish."""
    stamps = [t for t in (pod_finished_at(p) for p in failed) if t]
    at = max(stamps) if stamps else now
    why = f"pod {object_meta(failed[0]).get('name')} {_exit_text(failed[0])}"
    return Observation(job.job_id, job.attempt, JobState.FAILED, at, why, worker_failed=True)


def _progress(job: ActiveJob, mine: Sequence[Mapping], *, now: datetime) -> list[Observation]:
    """Step 3: Running once the gang is up (or all done), then Succeeded once every replica has."""
    phases = [pod_phase(p) for p in mine]
    up = [p for p, phase in zip(mine, phases, strict=True) if phase in ("Running", "Succeeded")]
    starts = [t for t in (pod_started_at(p) for p in up) if t]
    started = max(starts) if starts else now
    done = len(mine) >= job.replicas and all(phase == "Succeeded" for phase in phases)
    observations: list[Observation] = []
    if job.state == JobState.ADMITTED and (len(up) >= job.gang_size or done):
        observations.append(Observation(job.job_id, job.attempt, JobState.RUNNING, started, "pods running"))
    if done:
        stamps = [t for t in (pod_finished_at(p) for p in mine) if t]
        at = max([*stamps, started]) if stamps else now
        observations.append(Observation(job.job_id, job.attempt, JobState.SUCCEEDED, at, "all pods succeeded"))
    return observations
