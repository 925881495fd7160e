"""The cluster backend contract. It imports no implementation: ``factory.cluster_backend`` picks one.

A backend tells the portal what the cluster has (nodes, capacity held by pods the portal did not
create) and what happened to the portal's jobs (observations with the cluster's own timestamps), and
carries out the plan's side effects (start an admitted job's pods, stop a job's pods). It never
decides anything: the engine does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from django.conf import settings

from portal.jobs.states import JobState
from scheduling.engine.model import ForeignUsage, GpuNode


@dataclass(frozen=True, slots=True)
class Observation:
    """What the cluster reports about one job: it reached ``state`` at the cluster's time ``at``.

    ``attempt`` is the job's admission attempt the observation belongs to, so a stale report about
    a previous run of a requeued job is ignored.
    """

    job_id: int
    attempt: int
    state: str  # a JobState value: Running, Succeeded, Failed, or Pending (evicted and requeued)
    at: datetime
    reason: str = ""
    worker_failed: bool = False  # Failed because a replica's program failed (not the cluster)


class ClusterView(Protocol):
    """What a snapshot reads from the cluster: its nodes and the capacity others' pods hold."""

    def nodes(self) -> list[GpuNode]: ...

    def foreign_usage(self) -> list[ForeignUsage]: ...


class ClusterBackend(ClusterView, Protocol):
    name: str

    def start(self, *, job_id: int) -> None:
        """Create the pods of an admitted job on its placement (idempotent: retried creates succeed)."""

    def stop(self, *, job_id: int, grace_s: int) -> None:
        """Delete a job's pods (cancel, preemption). Idempotent."""

    def observe(self, *, now: datetime) -> list[Observation]:
        """Report job state changes seen in the cluster since the jobs were admitted."""


# Optional hooks a backend may add (``cluster_sync`` and ``manage.py audit`` look for them):
#   reconcile(*, now) -> dict   converge the cluster on the database after the observations
#                               (create missing pods, delete orphans); called under the cycle lock
#   sync() -> None              bring cached cluster state up to date before reading it
#   observed() -> None          the last observe's observations were applied (a backend that
#                               observes only what changed gives them back to the next pass without it)
#   raw_pods() -> list[dict]    the cluster's pods, for the pod/job invariants of the audit
#   namespaces_sync(wanted) -> list[ObjectReport]
#                               bring each team namespace's ResourceQuota and LimitRange in step
#                               (Kubernetes only: the simulated cluster has no namespaces)


ON_DEMAND = "on-demand"
OFF_PEAK = "off-peak"
SPOT = "spot"


def node_capacity_type(node: GpuNode) -> str:
    """``on-demand``, ``spot`` or ``reserved``: the node's ``CAPACITY_TYPE_LABEL`` (on-demand when absent)."""
    return dict(node.labels).get(settings.CAPACITY_TYPE_LABEL) or ON_DEMAND


def billed_capacity_type(capacity_type: str, *, off_peak: bool) -> str:
    """The price-book capacity type an admission is recorded (and so metered and billed) at.

    An off-peak job (it starts only in the off-peak hours) on on-demand capacity is billed at the
    off-peak price for its whole run; on spot or reserved capacity it keeps that type (the seed prices
    both below off-peak)."""
    return OFF_PEAK if off_peak and capacity_type == ON_DEMAND else capacity_type


def spot_toleration() -> dict[str, str]:
    """What a job submitted with ``spot: true`` tolerates: the spot nodes' taint (``SPOT_TAINT_KEY``),
    whatever its value and effect. The engine and the pods carry the same one."""
    return {"key": settings.SPOT_TAINT_KEY, "operator": "Exists", "value": "", "effect": ""}


def job_tolerations(tolerations: list[dict], *, spot: bool) -> list[dict]:
    """A job's tolerations as its pods carry them: its own, plus the spot taint's when it opted in."""
    return [*tolerations, spot_toleration()] if spot else list(tolerations)


@dataclass(frozen=True, slots=True)
class Reclaim:
    """A node's termination notice: the taint that announced it and when (the cluster's time)."""

    node: str
    taint: str
    at: datetime | None  # the taint's timeAdded; None when the taint does not say


def termination_notice(node: str, taints: Iterable[Mapping]) -> Reclaim | None:
    """The node's termination notice among its taints (``SPOT_TERMINATION_TAINTS``), if it has one."""
    for taint in taints:
        if taint.get("key") in settings.SPOT_TERMINATION_TAINTS:
            stamp = str(taint.get("timeAdded") or "")
            at = datetime.fromisoformat(stamp.replace("Z", "+00:00")) if stamp else None
            return Reclaim(node=node, taint=str(taint["key"]), at=at)
    return None


def node_lost_observation(
    *,
    job_id: int,
    attempt: int,
    node: str,
    notice: Reclaim | None,
    now: datetime,
    requeue: bool,
    spot: bool,
    resume_hint: str = "",
) -> Observation:
    """What a job whose node vanished (``notice`` None) or announced its end becomes, in both backends.

    At the notice's time when it gave one, so the job is billed up to the notice and never past the
    node; else ``now``. A job on spot capacity is requeued whatever its restart policy and told
    "interrupted by spot reclaim"; another is requeued or failed by its restart policy."""
    at = min(notice.at, now) if notice is not None and notice.at is not None else now
    why = f"reclaimed ({notice.taint})" if notice is not None else "lost"
    if spot:
        return Observation(
            job_id,
            attempt,
            JobState.PENDING,
            at,
            f"interrupted by spot reclaim: node {node} {why}; requeued{resume_hint}",
        )
    if requeue:
        return Observation(job_id, attempt, JobState.PENDING, at, f"requeued: node {node} {why}{resume_hint}")
    return Observation(job_id, attempt, JobState.FAILED, at, f"failed: node {node} {why}")
