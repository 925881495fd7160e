"""Victim selection (never eviction: the plan lists victims, an adapter evicts them).

For a job that fits neither quota nor nodes as they are:

1. Candidates are admitted or running, preemptible, not already chosen this cycle, and hold the GPU
   model the job is trying (any job for CPU-only work). Two kinds:
   - *priority*: same ClusterQueue, strictly lower priority;
   - *reclaim*: another ClusterQueue of the same cohort that is borrowing this resource, and only when
     the job's own queue stays within its nominal quota after admission.
2. Order: reclaim candidates first, then lowest priority, then youngest (latest start), then id.
3. Remove candidates one by one (in a ``Statement``), in that order: first until the request fits the
   queue's quota, then, among candidates on nodes the job could use, until a trial placement of the
   whole gang succeeds (a full trial only runs when the removal made one of the victim's nodes fit a
   replica). A reclaim candidate is skipped once its queue no longer borrows.
4. Minimise: try to put each chosen victim back, latest first (the last 32); keep it out only if the
   job no longer fits without removing it.
5. Undo everything: victims keep their resources until they are gone, so nothing else can take the
   room in this cycle, and the preemptor is admitted by a later cycle.

No loops: a priority victim has lower priority than its preemptor, so it can never preempt it back;
a reclaim victim's queue was borrowing while the preemptor's stays within nominal, so the victim's
queue cannot reclaim from it (it is not borrowing).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from .capacity import Cluster, Statement
from .model import ReplicaPlacement, Workload
from .quota import QuotaBook

MAX_CANDIDATES = 256
MAX_MINIMISE = 32


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


class VictimIndex:
    """Preemptible holders per ClusterQueue, each list in victim order (lowest priority, youngest).

    Built once per cycle from the workloads admitted or running before it (a job admitted in this
    cycle is never preempted in the same cycle).
    """

    def __init__(self, holders: list[Holder], cohort_of: dict[str, str]) -> None:
        self.by_cq: dict[str, list[Holder]] = {}
        self.cohort_members: dict[str, list[str]] = {}
        for cq, cohort in sorted(cohort_of.items()):
            if cohort:
                self.cohort_members.setdefault(cohort, []).append(cq)
        for holder in holders:
            if holder.workload.preemptible:
                self.by_cq.setdefault(holder.cq, []).append(holder)
        for group in self.by_cq.values():
            group.sort(key=lambda h: (h.workload.priority, -h.started, h.workload.id))

    def holding(self, cq: str, key: str | None) -> list[Holder]:
        """The queue's holders that hold ``key`` (all of them for ``None``), in victim order."""
        group = self.by_cq.get(cq, [])
        if key is None:
            return group
        return [h for h in group if h.request.get(key, 0) > 0]


def select_victims(
    *,
    job: Workload,
    cq: str,
    cohort: str,
    request: dict[str, int],
    gpu_key: str | None,
    index: VictimIndex,
    taken: set[str],
    quota: QuotaBook,
    cluster: Cluster,
    fits: Callable[[], bool],
    on_useful_node: Callable[[Holder], bool],
    frees_a_node: Callable[[Holder], bool],
) -> list[Victim] | None:
    """The smallest ordered set of victims after which ``fits()`` holds, or ``None``."""
    keys = [gpu_key] if gpu_key else [k for k in request if request[k] > 0]
    # 1.-2. Candidates in victim order: reclaim first, then by priority.
    candidates = _reclaim_candidates(cq, cohort, request, gpu_key, keys, index, taken, quota)
    candidates += _priority_candidates(job, cq, gpu_key, index, taken)
    if not candidates:
        return None
    search = _VictimSearch(cq, request, keys, quota, Statement(cluster), fits)
    # 3. Remove candidates until the quota fits, then until a trial placement succeeds.
    found = search.remove_until_fits(deque(candidates[:MAX_CANDIDATES]), on_useful_node, frees_a_node)
    # 4. Put back every victim the job can do without.
    if found:
        search.minimise()
    # 5. Undo: victims hold their resources until an adapter has evicted them.
    search.undo()
    return search.chosen if found else None


def _victim_order(victim: Victim) -> tuple[int, float, str]:
    return (victim.holder.workload.priority, -victim.holder.started, victim.holder.workload.id)


def _reclaim_candidates(
    cq: str,
    cohort: str,
    request: dict[str, int],
    gpu_key: str | None,
    keys: list[str],
    index: VictimIndex,
    taken: set[str],
    quota: QuotaBook,
) -> list[Victim]:
    """Holders in other queues of the cohort that borrow, when the job's queue stays within nominal."""
    if not cohort or quota.would_borrow(cq, request):
        return []
    reclaim: list[Victim] = []
    for other in index.cohort_members.get(cohort, []):
        if other == cq or not any(quota.borrowing(other, k) for k in keys):
            continue
        reclaim.extend(Victim(h, "reclaim") for h in index.holding(other, gpu_key) if h.workload.id not in taken)
    reclaim.sort(key=_victim_order)
    return reclaim


def _priority_candidates(
    job: Workload, cq: str, gpu_key: str | None, index: VictimIndex, taken: set[str]
) -> list[Victim]:
    """Holders in the job's own queue with strictly lower priority (holding the GPU model it tries)."""
    own: list[Victim] = []
    for holder in index.by_cq.get(cq, []):
        if holder.workload.priority >= job.priority:
            break  # sorted by priority: nothing further is lower
        if gpu_key is not None and holder.request.get(gpu_key, 0) <= 0:
            continue
        if holder.workload.id not in taken:
            own.append(Victim(holder, "priority"))
    return own


class _VictimSearch:
    """Steps 3-5: victims taken out of the quota book and (staged in ``stmt``) off their nodes."""

    def __init__(
        self,
        cq: str,
        request: dict[str, int],
        keys: list[str],
        quota: QuotaBook,
        stmt: Statement,
        fits: Callable[[], bool],
    ) -> None:
        self.cq = cq
        self.request = request
        self.keys = keys
        self.quota = quota
        self.stmt = stmt
        self.fits = fits
        self.chosen: list[Victim] = []
        self.on_nodes: set[int] = set()  # ids of chosen victims whose placements are given back

    def remove_until_fits(
        self,
        remaining: deque[Victim],
        on_useful_node: Callable[[Holder], bool],
        frees_a_node: Callable[[Holder], bool],
    ) -> bool:
        quota, cq, request = self.quota, self.cq, self.request
        # Quota first (cheap, no node changes): the fewest candidates, in order, that make the request fit.
        while not quota.fits(cq, request) and remaining:
            victim = remaining.popleft()
            if self._still_useful(victim):
                self._remove(victim, nodes_too=False)
                self.chosen.append(victim)
        found = quota.fits(cq, request) and self._trial()
        # Then placement: only candidates on nodes the job could use, and a full trial only when freeing
        # this one made some of its nodes fit a replica.
        while not found and remaining and quota.fits(cq, request):
            victim = remaining.popleft()
            if not self._still_useful(victim) or not on_useful_node(victim.holder):
                continue
            self._remove(victim, nodes_too=True)
            self.chosen.append(victim)
            found = frees_a_node(victim.holder) and self.fits()
        return found

    def minimise(self) -> None:
        """Try each chosen victim but the last back, latest first; keep it out only if needed."""
        for victim in reversed(self.chosen[:-1][-MAX_MINIMISE:]):
            self._restore(victim)
            if self.quota.fits(self.cq, self.request) and self.fits():
                self.chosen = [v for v in self.chosen if v is not victim]
            else:
                self._remove(victim, nodes_too=True)

    def undo(self) -> None:
        for victim in self.chosen:
            self.quota.add(victim.holder.cq, victim.holder.request, 1)
        self.stmt.discard()

    def _remove(self, victim: Victim, nodes_too: bool) -> None:
        self.quota.add(victim.holder.cq, victim.holder.request, -1)
        if nodes_too:
            self._give_back(victim)

    def _give_back(self, victim: Victim) -> None:
        for p in victim.holder.placements:
            self.stmt.give_back(p)
        self.on_nodes.add(id(victim))

    def _restore(self, victim: Victim) -> None:
        for p in victim.holder.placements:
            self.stmt.take(p)
        self.on_nodes.discard(id(victim))
        self.quota.add(victim.holder.cq, victim.holder.request, 1)

    def _trial(self) -> bool:
        for victim in self.chosen:  # the quota phase only touched quota; free their nodes now
            if id(victim) not in self.on_nodes:
                self._give_back(victim)
        return self.fits()

    def _still_useful(self, victim: Victim) -> bool:
        return victim.kind != "reclaim" or any(self.quota.borrowing(victim.holder.cq, k) for k in self.keys)
