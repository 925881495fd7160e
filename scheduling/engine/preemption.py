"""Victim selection (never eviction: the plan lists victims, an adapter evicts them).

For a job that fits neither quota nor nodes as they are:

1. Candidates are admitted or running, preemptible, not already chosen this cycle, past their
   priority class's minimum runtime (``Workload.min_runtime_s``, KAI's preemption delay), and hold
   the GPU model the job is trying (any job for CPU-only work). Two kinds:
   - *priority*: same ClusterQueue, strictly lower priority;
   - *reclaim*: another ClusterQueue of the same cohort that is borrowing this resource, and only when
     the job's own queue stays within its nominal quota after admission. A reclaim candidate only
     counts while its queue still borrows.
2. Cost order of one victim (:func:`victim_cost`): lowest priority, then fewest GPU-seconds lost
   (its GPUs times the seconds it has run), then youngest (latest start), then id. The order of
   victim *sets* (:func:`set_cost`): the highest priority in the set, then the GPU-seconds the set
   loses, then the start of its oldest member (later is better), then fewer victims, then ids. A
   strict subset always costs less, so the cheapest set that lets the job fit is minimal.
3. Greedy: remove candidates in cost order (in a ``Statement``), all of them if need be: first until
   the request fits the queue's quota, then, among candidates on nodes the job could use, until a
   trial placement of the whole gang succeeds (a full trial only runs when the removal made one of
   the victim's nodes fit a replica).
4. Minimise: put every chosen victim back, most costly first; keep it out only if the job no longer
   fits without removing it. Afterwards no victim can be spared (the set is minimal), whatever the
   number of candidates.
5. Cheapest: a branch-and-bound search over the useful candidates (those that free quota the job
   lacks or sit on nodes it could use) for a set cheaper than step 4's, pruning every partial set
   that already costs as much as the best found, within ``MAX_TRIALS`` placement trials,
   ``MAX_STEPS`` partial sets and ``MAX_DEPTH`` victims. It is exhaustive on small cases (a dozen
   useful candidates); on large ones it keeps the cheapest minimal set found so far.
6. Undo everything: victims keep their resources until they are gone, so nothing else can take the
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

GPU_PREFIX = "gpu/"  # quota keys of GPU models (``quota.gpu_key``)

# Step 5's bounds per preemptor: placement trials, partial sets visited, victims in one partial set.
MAX_TRIALS = 256
MAX_STEPS = 4096
MAX_DEPTH = 64

SetCost = tuple[int, int, float, int, tuple[str, ...]]


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

    @property
    def gpu_milli(self) -> int:
        """The GPU share it holds, in milli-GPU (every GPU model it holds)."""
        return sum(amount for key, amount in self.request.items() if key.startswith(GPU_PREFIX))

    def lost_gpu_milli_s(self, now: float) -> int:
        """Work lost if it is evicted now: its GPU share times the seconds it has run (milli-GPU-s)."""
        return round(self.gpu_milli * max(0.0, now - self.started))


@dataclass(frozen=True, slots=True)
class Victim:
    holder: Holder
    kind: str  # "priority" | "reclaim"
    lost_gpu_milli_s: int = 0


def victim_cost(victim: Victim) -> tuple[int, int, float, str]:
    """Step 2, one victim: lowest priority, fewest GPU-seconds lost, youngest, id."""
    w = victim.holder.workload
    return (w.priority, victim.lost_gpu_milli_s, -victim.holder.started, w.id)


def set_cost(victims: list[Victim]) -> SetCost:
    """Step 2, a set: highest priority in it, GPU-seconds lost, oldest start (later is better), size."""
    return (
        max(v.holder.workload.priority for v in victims),
        sum(v.lost_gpu_milli_s for v in victims),
        -min(v.holder.started for v in victims),
        len(victims),
        tuple(sorted(v.holder.workload.id for v in victims)),
    )


class VictimIndex:
    """Preemptible holders per ClusterQueue, each list in priority order (lowest first).

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
        """The queue's holders that hold ``key`` (all of them for ``None``), in priority order."""
        group = self.by_cq.get(cq, [])
        if key is None:
            return group
        return [h for h in group if h.request.get(key, 0) > 0]


def protected(holder: Holder, now: float) -> bool:
    """Whether it has not yet run its priority class's minimum runtime (it may not be preempted)."""
    return now - holder.started < holder.workload.min_runtime_s


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
    now: float,
    fits: Callable[[], bool],
    on_useful_node: Callable[[Holder], bool],
    frees_a_node: Callable[[Holder], bool],
) -> list[Victim] | None:
    """The cheapest minimal set of victims after which ``fits()`` holds (in cost order), or ``None``."""
    keys = [gpu_key] if gpu_key else [k for k in request if request[k] > 0]
    # 1.-2. Candidates in cost order.
    candidates = _reclaim_candidates(cq, cohort, request, gpu_key, keys, index, taken, quota, now)
    candidates += _priority_candidates(job, cq, gpu_key, index, taken, now)
    if not candidates:
        return None
    candidates.sort(key=victim_cost)
    search = _VictimSearch(cq, request, keys, quota, Statement(cluster), fits, frees_a_node)
    quota_short = not quota.fits(cq, request)
    # 3. Remove candidates until the quota fits, then until a trial placement succeeds.
    found = search.remove_until_fits(deque(candidates), on_useful_node)
    if found:
        # 4. Put back every victim the job can do without.
        search.minimise()
        # 5. Look for a cheaper minimal set among the useful candidates.
        useful = [v for v in candidates if (quota_short and _frees_quota(v, keys)) or on_useful_node(v.holder)]
        search.cheapest(useful)
    # 6. Undo: victims hold their resources until an adapter has evicted them.
    search.undo()
    return sorted(search.best, key=victim_cost) if found else None


def _frees_quota(victim: Victim, keys: list[str]) -> bool:
    return any(victim.holder.request.get(k, 0) > 0 for k in keys)


def _reclaim_candidates(
    cq: str,
    cohort: str,
    request: dict[str, int],
    gpu_key: str | None,
    keys: list[str],
    index: VictimIndex,
    taken: set[str],
    quota: QuotaBook,
    now: float,
) -> list[Victim]:
    """Holders in other queues of the cohort that borrow, when the job's queue stays within nominal."""
    if not cohort or quota.would_borrow(cq, request):
        return []
    reclaim: list[Victim] = []
    for other in index.cohort_members.get(cohort, []):
        if other == cq or not any(quota.borrowing(other, k) for k in keys):
            continue
        reclaim.extend(
            Victim(h, "reclaim", h.lost_gpu_milli_s(now))
            for h in index.holding(other, gpu_key)
            if h.workload.id not in taken and not protected(h, now)
        )
    return reclaim


def _priority_candidates(
    job: Workload, cq: str, gpu_key: str | None, index: VictimIndex, taken: set[str], now: float
) -> list[Victim]:
    """Holders in the job's own queue with strictly lower priority (holding the GPU model it tries)."""
    own: list[Victim] = []
    for holder in index.by_cq.get(cq, []):
        if holder.workload.priority >= job.priority:
            break  # sorted by priority: nothing further is lower
        if gpu_key is not None and holder.request.get(gpu_key, 0) <= 0:
            continue
        if holder.workload.id not in taken and not protected(holder, now):
            own.append(Victim(holder, "priority", holder.lost_gpu_milli_s(now)))
    return own


class _VictimSearch:
    """Steps 3-6: victims taken out of the quota book and (staged in ``stmt``) off their nodes."""

    def __init__(
        self,
        cq: str,
        request: dict[str, int],
        keys: list[str],
        quota: QuotaBook,
        stmt: Statement,
        fits: Callable[[], bool],
        frees_a_node: Callable[[Holder], bool],
    ) -> None:
        self.cq = cq
        self.request = request
        self.keys = keys
        self.quota = quota
        self.stmt = stmt
        self.fits = fits
        self.frees_a_node = frees_a_node
        self.chosen: list[Victim] = []
        self.on_nodes: set[int] = set()  # ids of chosen victims whose placements are given back
        self.best: list[Victim] = []
        self.best_cost: SetCost | None = None
        self.trials = 0
        self.steps = 0

    def remove_until_fits(self, remaining: deque[Victim], on_useful_node: Callable[[Holder], bool]) -> bool:
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
            found = self.frees_a_node(victim.holder) and self.fits()
        return found

    def minimise(self) -> None:
        """Step 4: try each chosen victim back, most costly first; keep it out only if needed."""
        for victim in sorted(self.chosen, key=victim_cost, reverse=True):
            self._restore(victim)
            if self.quota.fits(self.cq, self.request) and self.fits():
                self.chosen = [v for v in self.chosen if v is not victim]
            else:
                self._remove(victim, nodes_too=True)
        self.best = list(self.chosen)
        self.best_cost = set_cost(self.best)

    def cheapest(self, candidates: list[Victim]) -> None:
        """Step 5: branch and bound over ``candidates`` (in cost order) for a cheaper fitting set."""
        for victim in list(self.chosen):  # start from nothing removed
            self._restore(victim)
        self.chosen = []
        self._branch(candidates, 0, self.quota.fits(self.cq, self.request))

    def _branch(self, candidates: list[Victim], start: int, quota_fitted: bool) -> None:
        """Extend ``chosen`` by each candidate from ``start`` on (``quota_fitted``: whether the quota
        fitted before; a trial runs when the quota fits now and either it did not before or the new
        victim's nodes now fit a replica: otherwise the placement is no better than its parent's)."""
        assert self.best_cost is not None
        for j in range(start, len(candidates)):
            if self.trials >= MAX_TRIALS or self.steps >= MAX_STEPS:
                return
            self.steps += 1
            victim = candidates[j]
            if not self._still_useful(victim):
                continue
            cost = set_cost([*self.chosen, victim])
            if cost >= self.best_cost:
                continue  # any superset costs at least as much
            self._remove(victim, nodes_too=True)
            self.chosen.append(victim)
            quota_fits = self.quota.fits(self.cq, self.request)
            if quota_fits and (not quota_fitted or self.frees_a_node(victim.holder)):
                self.trials += 1
                if self.fits():
                    self.best, self.best_cost = list(self.chosen), cost
                    self._restore(self.chosen.pop())
                    continue  # supersets cost more
            if len(self.chosen) < MAX_DEPTH:
                self._branch(candidates, j + 1, quota_fits)
            self._restore(self.chosen.pop())

    def undo(self) -> None:
        for victim in self.chosen:
            self.quota.add(victim.holder.cq, victim.holder.request, 1)
        self.chosen = []
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
        if id(victim) in self.on_nodes:
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
