"""The cluster backend contract. It imports no implementation: ``factory.cluster_backend`` picks one.

A backend tells the portal what the cluster has (nodes, capacity held by pods the portal did not
create) and what happened to the portal's jobs (observations with the cluster's own timestamps), and
carries out the plan's side effects (start an admitted job's pods, stop a job's pods). It never
decides anything: the engine does.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from django.conf import settings

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
#   raw_pods() -> list[dict]    the cluster's pods, for the pod/job invariants of the audit
#   namespaces_sync(wanted) -> list[ObjectReport]
#                               bring each team namespace's ResourceQuota and LimitRange in step
#                               (Kubernetes only: the simulated cluster has no namespaces)


ON_DEMAND = "on-demand"
OFF_PEAK = "off-peak"


def node_capacity_type(node: GpuNode) -> str:
    """``on-demand``, ``spot`` or ``reserved``: the node's ``CAPACITY_TYPE_LABEL`` (on-demand when absent)."""
    return dict(node.labels).get(settings.CAPACITY_TYPE_LABEL) or ON_DEMAND


def billed_capacity_type(capacity_type: str, *, off_peak: bool) -> str:
    """The price-book capacity type an admission is recorded (and so metered and billed) at.

    An off-peak job (it starts only in the off-peak hours) on on-demand capacity is billed at the
    off-peak price for its whole run; on spot or reserved capacity it keeps that type (the seed prices
    both below off-peak)."""
    return OFF_PEAK if off_peak and capacity_type == ON_DEMAND else capacity_type
