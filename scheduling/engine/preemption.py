"""Victim selection (never eviction: the plan lists victims, an adapter evicts them).

For a job that fits neither quota nor nodes as they are:

1. Candidates are admitted or running, preemptible, not already chosen this cycle, past their
   priority class's minimum runtime (``Workload.min_runtime_s``, KAI's preemption delay), and hold
   the GPU model the job is trying (any job for CPU-only work). Two kinds:
   - *priority*: same ClusterQueue, strictly lower priority;
   - *reclaim*: another ClusterQueue of the same cohort that is borrowing this resource, and only when
     the job's own queue stays within its nominal quota after admission. A reclaim candidate only
     counts while its queue still borrows;
   - *serving* (``Policy.inference_preempts_training``): for an inference replica, a training job of
     strictly lower priority in any other ClusterQueue (it frees nodes; the replica's own quota
     must still fit, as for any job).
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
5. Cheapest: when at most ``MAX_EXACT`` candidates are useful (they free quota the job lacks or sit
   on nodes it could use), a branch-and-bound search over them for a set cheaper than step 4's,
   pruning every partial set that already costs as much as the best found, within ``MAX_TRIALS``
   placement trials, ``MAX_STEPS`` partial sets and ``MAX_DEPTH`` victims: exhaustive on small
   cases; when a bound stops it, the cheapest set found so far stands. With more candidates step
   4's minimal set stands.
6. Undo everything: victims keep their resources until they are gone, so nothing else can take the
   room in this cycle, and the preemptor is admitted by a later cycle.

No loops: a priority victim has lower priority than its preemptor, so it can never preempt it back;
a reclaim victim's queue was borrowing while the preemptor's stays within nominal, so the victim's
queue cannot reclaim from it (it is not borrowing). Nor is a victim re-admitted ahead of its
preemptor in the next cycle: a preemptor of the nominal pass comes before every job of the borrowing
pass, and one of the borrowing pass (a job below a deferred job of its queue) reclaims only from jobs
of at most its own priority (``reclaim_max_priority``), which that pass orders after it (priority
first; of equal priority the job within its queue's nominal quota goes first). Without that bound a
higher-priority borrower took the reclaimed room back every other cycle (found by Hypothesis).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .capacity import Cluster, Statement
from .model import ReplicaPlacement, Workload
from .quota import QuotaBook

GPU_PREFIX = "gpu/"  # quota keys of GPU models (``quota.gpu_key``)
INFERENCE, TRAINING = "inference", "training"  # the kinds the serving rule reads (``Workload.kind``)

# Step 5's bounds per preemptor: placement trials, partial sets visited, victims in one partial set.
MAX_TRIALS = 256
MAX_STEPS = 4096
MAX_DEPTH = 64
# Step 5 runs when at most this many candidates are useful (beyond, step 4's minimal set stands).
MAX_EXACT = 24

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
        return sum([amount for key, amount in self.request.items() if key.startswith(GPU_PREFIX)])

    def lost_gpu_milli_s(self, now: float) -> int:
        """Work lost if it is evicted now: its GPU share times the seconds it has run (milli-GPU-s)."""
        return round(self.gpu_milli * max(0.0, now - self.started))


@dataclass(frozen=True, slots=True)
class Victim:
    holder: Holder
    kind: str  # "priority" | "reclaim" | "serving"
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
    """Preemptible holders per ClusterQueue as victims, each list in cost order (:func:`victim_cost`).

    Built once per cycle (``now`` is fixed within it) from the workloads admitted or running before
    it (a job admitted in this cycle is never preempted in the same cycle).
    """

    def __init__(self, holders: list[Holder], cohort_of: dict[str, str], now: float) -> None:
        self.now = now
        self.cohort_members: dict[str, list[str]] = {}
        for cq, cohort in sorted(cohort_of.items()):
            if cohort:
                self.cohort_members.setdefault(cohort, []).append(cq)
        self._holders: dict[str, list[Holder]] = {}
        for holder in holders:
            if holder.workload.preemptible:
                self._holders.setdefault(holder.cq, []).append(holder)
        # Built on first use: only the queues of this cycle's preemptors (and their cohorts) are needed.
        self._victims: dict[tuple[str, str], list[Victim]] = {}
        self._ordered: dict[str, list[Victim]] = {}  # per queue, in cost order (whatever the kind)
        self._open: dict[tuple[str, str, str | None, float], list[Victim]] = {}  # see :meth:`open_victims`

    def victims(self, cq: str, kind: str) -> list[Victim]:
        """The queue's preemptible holders as victims of ``kind``, in cost order."""
        key = (cq, kind)
        found = self._victims.get(key)
        if found is None:
            # The cost order does not depend on the kind: sort each queue once, relabel per kind.
            ordered = self._ordered.get(cq)
            if ordered is None:
                ordered = self._ordered[cq] = found = self._in_cost_order(self._holders.get(cq, ()), kind)
            else:
                found = [v if v.kind == kind else Victim(v.holder, kind, v.lost_gpu_milli_s) for v in ordered]
            self._victims[key] = found
        return found

    def open_victims(self, cq: str, kind: str, gpu_key: str | None, now: float) -> list[Victim]:
        """:meth:`victims` that hold ``gpu_key`` (any, for ``None``) and are not protected at ``now``, in
        cost order: neither changes during a cycle, so the list is made once per cycle."""
        key = (cq, kind, gpu_key, now)
        found = self._open.get(key)
        if found is None:
            if cq in self._ordered:
                found = [
                    v
                    for v in self.victims(cq, kind)
                    if (gpu_key is None or v.holder.request.get(gpu_key, 0) > 0) and not protected(v.holder, now)
                ]
            else:  # the same list: filtering keeps the cost order, and fewer holders are costed and sorted
                found = self._in_cost_order(
                    [
                        h
                        for h in self._holders.get(cq, ())
                        if (gpu_key is None or h.request.get(gpu_key, 0) > 0) and not protected(h, now)
                    ],
                    kind,
                )
            self._open[key] = found
        return found

    def _in_cost_order(self, holders: Sequence[Holder], kind: str) -> list[Victim]:
        """``holders`` as victims of ``kind``, in cost order."""
        now = self.now
        return sorted((Victim(h, kind, h.lost_gpu_milli_s(now)) for h in holders), key=victim_cost)

    def queues(self) -> list[str]:
        """The queues that hold preemptible workloads, by name."""
        return sorted(self._holders)

    def holding(self, cq: str, key: str | None) -> list[Victim]:
        """The queue's victims (kind ``reclaim``) that hold ``key`` (all for ``None``), in cost order."""
        group = self.victims(cq, "reclaim")
        if key is None:
            return group
        return [v for v in group if v.holder.request.get(key, 0) > 0]


def protected(holder: Holder, now: float) -> bool:
    """Whether it has not yet run its priority class's minimum runtime (it may not be preempted)."""
    return now - holder.started < holder.workload.min_runtime_s


def protected_until(victims: list[Victim], now: float) -> float | None:
    """When the last of ``victims`` still within its minimum runtime reaches it (``None``: none is)."""
    ends = [v.holder.started + v.holder.workload.min_runtime_s for v in victims if protected(v.holder, now)]
    return max(ends) if ends else None


def any_protected(holders: list[Holder], now: float) -> bool:
    return any(h.workload.preemptible and protected(h, now) for h in holders)


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
    placed_on: Callable[[], set[str]] = set,
    serving_rule: bool = False,
    min_runtime: bool = True,
    reclaim_max_priority: int | None = None,
) -> list[Victim] | None:
    """The cheapest minimal set of victims after which ``fits()`` holds (in cost order), or ``None``.

    ``min_runtime=False`` ignores the minimum runtime (only to tell a waiting job which protected jobs
    it would preempt once they have run it: :func:`protected_until`). ``reclaim_max_priority`` bounds
    the priority of reclaim candidates (the borrowing pass: see the module's "No loops")."""
    keys = [gpu_key] if gpu_key else [k for k in request if request[k] > 0]
    if not min_runtime:
        now = math.inf  # ``protected`` is false for every holder
    # 1.-2. Candidates in cost order.
    candidates = _reclaim_candidates(cq, cohort, request, gpu_key, keys, index, taken, quota, now)
    if reclaim_max_priority is not None:
        candidates = [v for v in candidates if v.holder.workload.priority <= reclaim_max_priority]
    candidates += _priority_candidates(job, cq, gpu_key, index, taken, now)
    if serving_rule and job.kind == INFERENCE:
        seen = {v.holder.workload.id for v in candidates}  # a borrowing trainer is a reclaim candidate already
        candidates += [
            v for v in _serving_candidates(job, cq, gpu_key, index, taken, now) if v.holder.workload.id not in seen
        ]
    if not candidates:
        return None
    candidates.sort(key=victim_cost)
    search = _VictimSearch(cq, request, keys, quota, Statement(cluster), fits, frees_a_node)
    quota_short = not quota.fits(cq, request)
    # 3. Remove candidates until the quota fits, then until a trial placement succeeds.
    found = search.remove_until_fits(deque(candidates), on_useful_node)
    if found:
        # 4. Put back every victim the job can do without.
        search.minimise(on_useful_node, placed_on())
        # 5. Look for a cheaper minimal set among the useful candidates.
        useful: list[Victim] = []
        on_nodes: set[str] = set()
        for v in candidates:
            on_node = on_useful_node(v.holder)
            if on_node or (quota_short and _frees_quota(v, keys)):
                useful.append(v)
                if on_node:
                    on_nodes.add(v.holder.workload.id)
                if len(useful) > MAX_EXACT:
                    break
        if len(useful) <= MAX_EXACT:
            search.cheapest(useful, on_nodes)
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
            v
            for v in index.holding(other, gpu_key)
            if v.holder.workload.id not in taken and not protected(v.holder, now)
        )
    return reclaim


def _priority_candidates(
    job: Workload, cq: str, gpu_key: str | None, index: VictimIndex, taken: set[str], now: float
) -> list[Victim]:
    """Holders in the job's own queue with strictly lower priority (holding the GPU model it tries)."""
    own: list[Victim] = []
    priority = job.priority
    for victim in index.open_victims(cq, "priority", gpu_key, now):
        workload = victim.holder.workload
        if workload.priority >= priority:
            break  # in cost order, priority first: nothing further is lower
        if workload.id not in taken:
            own.append(victim)
    return own


def _serving_candidates(
    job: Workload, cq: str, gpu_key: str | None, index: VictimIndex, taken: set[str], now: float
) -> list[Victim]:
    """Training jobs of strictly lower priority in the other queues (holding the GPU model it tries)."""
    found: list[Victim] = []
    for other in index.queues():
        if other == cq:
            continue
        for victim in index.victims(other, "serving"):
            holder = victim.holder
            if holder.workload.priority >= job.priority:
                break  # in cost order, priority first
            if holder.workload.kind != TRAINING or (gpu_key is not None and holder.request.get(gpu_key, 0) <= 0):
                continue
            if holder.workload.id not in taken and not protected(holder, now):
                found.append(victim)
    return found


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
        self.cluster_apply = stmt.cluster.apply
        self.fits = fits
        self.frees_a_node = frees_a_node
        self.chosen: list[Victim] = []
        # Victims whose placements are given back, by id(): the chosen ones, and in step 5 also some
        # no longer chosen until the next ``_sync`` (node changes are made lazily there).
        self.on_nodes: dict[int, Victim] = {}
        self.best: list[Victim] = []
        self.best_cost: SetCost | None = None
        self.trials = 0
        self.steps = 0
        self._useful_nodes: set[str] = set()
        self._bound: tuple[int, int, float, int] = (0, 0, 0.0, 0)

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

    def minimise(self, on_useful_node: Callable[[Holder], bool], placed_on: set[str]) -> None:
        """Step 4: try each chosen victim back, most costly first; keep it out only if needed.

        ``placed_on``: the nodes a trial placement of the job used. A victim on none of them leaves
        that placement possible when it comes back, so only the quota decides whether it is needed
        (no placement trial); so does a victim on no node the job could use. The others come back
        one trial each."""
        spare = [v for v in self.chosen if not any(p.node in placed_on for p in v.holder.placements)]
        if not placed_on:
            spare = [v for v in self.chosen if not on_useful_node(v.holder)]
        spare_ids = {id(v) for v in spare}  # by identity, as the victims are chosen
        kept = [v for v in self.chosen if id(v) not in spare_ids]
        for victim in sorted(spare, key=victim_cost, reverse=True):
            self._restore(victim)
            if not self.quota.fits(self.cq, self.request):
                self._remove(victim, nodes_too=True)
                kept.append(victim)
        self.chosen = kept
        for victim in sorted(kept, key=victim_cost, reverse=True):
            if id(victim) not in spare_ids:
                self._restore(victim)
                if self.quota.fits(self.cq, self.request) and self.fits():
                    self.chosen = [v for v in self.chosen if v is not victim]
                else:
                    self._remove(victim, nodes_too=True)
        self.best = list(self.chosen)
        self.best_cost = set_cost(self.best)

    def cheapest(self, candidates: list[Victim], useful_nodes: set[str]) -> None:
        """Step 5: branch and bound over ``candidates`` (in cost order) for a cheaper fitting set.
        Victims not in ``useful_nodes`` (ids) only free quota: their nodes are left as they are."""
        for victim in list(self.chosen):  # start from nothing removed
            self._restore(victim)
        self.chosen = []
        self._useful_nodes = useful_nodes
        assert self.best_cost is not None
        self._bound = self.best_cost[:4]
        self._branch(candidates, 0, self.quota.fits(self.cq, self.request), (-(2**62), 0, -float("inf"), 0))
        self._sync()  # chosen is empty again: every placement taken back

    def _branch(
        self, candidates: list[Victim], start: int, quota_fitted: bool, partial: tuple[int, int, float, int]
    ) -> None:
        """Extend ``chosen`` by each candidate from ``start`` on. ``partial``: the first four parts of
        ``set_cost(chosen)``, kept incrementally; ``quota_fitted``: whether the quota fitted before. A
        trial runs when the quota fits now and either it did not before or the new victim's nodes now
        fit a replica (otherwise the placement is no better than its parent's)."""
        top, lost, oldest, size = partial
        for j in range(start, len(candidates)):
            if self.trials >= MAX_TRIALS or self.steps >= MAX_STEPS:
                return
            self.steps += 1
            victim = candidates[j]
            w = victim.holder.workload
            if w.priority > self._bound[0]:
                break  # in cost order: every later candidate has at least this priority
            cost = (max(top, w.priority), lost + victim.lost_gpu_milli_s, max(oldest, -victim.holder.started), size + 1)
            if cost > self._bound or not self._still_useful(victim):
                continue  # any superset costs at least as much
            if cost == self._bound and set_cost([*self.chosen, victim]) >= self.best_cost:  # type: ignore[operator]
                continue
            self.quota.add(victim.holder.cq, victim.holder.request, -1)
            self.chosen.append(victim)
            quota_fits = self.quota.fits(self.cq, self.request)
            useful = w.id in self._useful_nodes
            if quota_fits and (not quota_fitted or useful):
                self._sync()
                if not quota_fitted or self.frees_a_node(victim.holder):
                    self.trials += 1
                    if self.fits():
                        self.best, self.best_cost = list(self.chosen), set_cost(self.chosen)
                        self._bound = cost
                        self.quota.add(victim.holder.cq, victim.holder.request, 1)
                        self.chosen.pop()
                        continue  # supersets cost more
            if len(self.chosen) < MAX_DEPTH:
                self._branch(candidates, j + 1, quota_fits, cost)
            self.quota.add(victim.holder.cq, victim.holder.request, 1)
            self.chosen.pop()

    def undo(self) -> None:
        """Everything back as it was: quota of the chosen, placements of those given back. Done
        explicitly rather than by replaying the statement's log (step 5 may log thousands of changes
        that cancel out)."""
        for victim in self.chosen:
            self.quota.add(victim.holder.cq, victim.holder.request, 1)
        self.chosen = []
        for victim in self.on_nodes.values():
            for p in victim.holder.placements:
                self.cluster_apply(p, 1)
        self.on_nodes.clear()
        self.stmt.commit()

    def _remove(self, victim: Victim, nodes_too: bool) -> None:
        self.quota.add(victim.holder.cq, victim.holder.request, -1)
        if nodes_too:
            self._give_back(victim)

    def _give_back(self, victim: Victim) -> None:
        for p in victim.holder.placements:
            self.cluster_apply(p, -1)
        self.on_nodes[id(victim)] = victim

    def _restore(self, victim: Victim) -> None:
        if self.on_nodes.pop(id(victim), None) is not None:
            for p in victim.holder.placements:
                self.cluster_apply(p, 1)
        self.quota.add(victim.holder.cq, victim.holder.request, 1)

    def _sync(self) -> None:
        """Step 5's lazy node changes: give back the chosen victims on useful nodes, take back the
        rest."""
        chosen = {id(v) for v in self.chosen if v.holder.workload.id in self._useful_nodes}
        for key in [k for k in self.on_nodes if k not in chosen]:
            for p in self.on_nodes.pop(key).holder.placements:
                self.cluster_apply(p, 1)
        for victim in self.chosen:
            if id(victim) in chosen and id(victim) not in self.on_nodes:
                self._give_back(victim)

    def _trial(self) -> bool:
        for victim in self.chosen:  # the quota phase only touched quota; free their nodes now
            if id(victim) not in self.on_nodes:
                self._give_back(victim)
        return self.fits()

    def _still_useful(self, victim: Victim) -> bool:
        return victim.kind != "reclaim" or any(self.quota.borrowing(victim.holder.cq, k) for k in self.keys)
