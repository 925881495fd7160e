"""Victim selection (never eviction: the plan lists victims, an adapter evicts them).

For a job that fits neither quota nor nodes as they are:

1. Candidates are admitted or running, preemptible, not already chosen this cycle, and hold the GPU
   model the job is trying (any job for CPU-only work). Two kinds:
   - *priority*: same ClusterQueue, strictly lower priority;
   - *reclaim*: another ClusterQueue of the same cohort that is borrowing this resource, and only when
     the job's own queue stays within its nominal quota after admission.
2. Order: reclaim candidates first, then lowest priority, then youngest (latest start), then id.
3. Remove candidates one by one (in a ``Statement``) until the job fits both quota and placement; a
   reclaim candidate is skipped once its queue no longer borrows.
4. Minimise: try to put each chosen victim back, latest first; keep it if the job still fits.
5. Undo everything: victims keep their resources until they are gone, so nothing else can take the
   room in this cycle, and the preemptor is admitted by a later cycle.

No loops: a priority victim has lower priority than its preemptor, so it can never preempt it back;
a reclaim victim's queue was borrowing while the preemptor's stays within nominal, so the victim's
queue cannot reclaim from it (it is not borrowing).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .capacity import Cluster, Statement
from .model import ReplicaPlacement, Workload
from .quota import QuotaBook

MAX_CANDIDATES = 256


@dataclass(slots=True)
class Holder:
    """An admitted or running workload and what it holds."""

    workload: Workload
    lq: str
    cq: str
    request: dict[str, int]
    placements: tuple[ReplicaPlacement, ...]

    @property
    def started(self) -> float:
        w = self.workload
        return w.started_at if w.started_at is not None else w.created_at


@dataclass(frozen=True, slots=True)
class Victim:
    holder: Holder
    kind: str  # "priority" | "reclaim"


def select_victims(
    *,
    job: Workload,
    cq: str,
    cohort: str,
    request: dict[str, int],
    gpu_key: str | None,
    holders: list[Holder],
    cohort_of: dict[str, str],
    taken: set[str],
    quota: QuotaBook,
    cluster: Cluster,
    fits: Callable[[], bool],
) -> list[Victim] | None:
    """The smallest ordered set of victims after which ``fits()`` holds, or ``None``."""
    may_reclaim = bool(cohort) and not quota.would_borrow(cq, request)
    candidates: list[Victim] = []
    for holder in holders:
        w = holder.workload
        if not w.preemptible or w.id in taken or w.id == job.id:
            continue
        if gpu_key is not None and holder.request.get(gpu_key, 0) <= 0:
            continue
        if holder.cq == cq:
            if w.priority < job.priority:
                candidates.append(Victim(holder, "priority"))
        elif may_reclaim and cohort_of.get(holder.cq) == cohort:
            keys = [gpu_key] if gpu_key else [k for k in request if request[k] > 0]
            if any(quota.borrowing(holder.cq, k) for k in keys):
                candidates.append(Victim(holder, "reclaim"))
    if not candidates:
        return None
    candidates.sort(
        key=lambda v: (
            v.kind != "reclaim",
            v.holder.workload.priority,
            -v.holder.started,
            v.holder.workload.id,
        )
    )
    candidates = candidates[:MAX_CANDIDATES]
    keys = [gpu_key] if gpu_key else [k for k in request if request[k] > 0]
    stmt = Statement(cluster)
    chosen: list[Victim] = []

    def remove(victim: Victim) -> None:
        for p in victim.holder.placements:
            stmt.give_back(p)
        quota.add(victim.holder.cq, victim.holder.request, -1)

    def restore(victim: Victim) -> None:
        for p in victim.holder.placements:
            stmt.take(p)
        quota.add(victim.holder.cq, victim.holder.request, 1)

    def ok() -> bool:
        return quota.fits(cq, request) and fits()

    found = False
    for victim in candidates:
        if victim.kind == "reclaim" and not any(quota.borrowing(victim.holder.cq, k) for k in keys):
            continue
        remove(victim)
        chosen.append(victim)
        if ok():
            found = True
            break
    if found:
        for victim in reversed(chosen[:-1]):
            restore(victim)
            if ok():
                chosen.remove(victim)
            else:
                remove(victim)
    # Undo: victims hold their resources until an adapter has evicted them.
    for victim in chosen:
        quota.add(victim.holder.cq, victim.holder.request, 1)
    stmt.discard()
    return chosen if found else None
