"""Admission order: priority, then weighted dominant-resource fair share, then submission time.

Every LocalQueue keeps its pending jobs sorted by (priority desc, created_at, id). The next job the
cycle considers is the best *head* among all LocalQueues under the key

    (-priority, share(ClusterQueue in its cohort), share(LocalQueue in its ClusterQueue), created_at, id)

where ``share`` is the weighted dominant resource share (DRF): for each resource ``r`` (each GPU model
in milli-GPU, CPU, memory) ``usage_r / pool_r``, the maximum over ``r``, divided by the weight. The
pool of a ClusterQueue is its cohort's summed nominal quota (its own when it has no cohort); the pool of
a LocalQueue is its ClusterQueue's nominal quota; a resource without quota uses the cluster's capacity.

Shares only grow while a cycle admits, so a heap with lazily refreshed keys is exact: pop the best
entry, recompute its key, and push it back if it went up. :meth:`AdmissionOrder.refresh` rebuilds the
heap when usage went down (after eviction).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from typing import Protocol

from .model import ClusterQueue, LocalQueue, Workload

SortKey = tuple[int, bool, float, float, float, str]


class Changes(Protocol):
    """What ``AdmissionOrder``'s ``borrows`` reads, with its changes counted (``QuotaBook``)."""

    changes: int

    def unchanged_since(self, stamp: int, cq: str) -> bool: ...


def lq_order_key(workload: Workload) -> tuple[int, float, str]:
    return (-workload.priority, workload.created_at, workload.id)


def dominant_resource(usage: dict[str, int], pool: dict[str, int], capacity: dict[str, int]) -> tuple[str, float]:
    """``(resource key, usage / pool)`` of the resource with the largest share of its pool ("" and 0.0
    when nothing is used). A resource the pool has no quota for is measured against ``capacity`` (the
    cluster's); one with neither is left out. Ties go to the smaller key."""
    best_key, best = "", 0.0
    for key in sorted(usage):
        used = usage[key]
        denominator = pool.get(key) or capacity.get(key) or 0
        if denominator > 0 and used > 0 and used / denominator > best:
            best_key, best = key, used / denominator
    return best_key, best


def weighted_dominant_share(
    usage: dict[str, int], pool: dict[str, int], capacity: dict[str, int], weight: float
) -> float:
    """The weighted DRF share that orders admission (docs/engine.md, "Fair share"):
    ``max_r(usage_r / pool_r) / weight``, ``pool_r`` falling back to ``capacity_r``; a weight of 0 counts as 1."""
    return dominant_resource(usage, pool, capacity)[1] / (weight or 1.0)


class FairShare:
    """Usage per ClusterQueue and LocalQueue and the weighted dominant shares derived from it."""

    def __init__(
        self,
        cluster_queues: tuple[ClusterQueue, ...],
        local_queues: tuple[LocalQueue, ...],
        nominal: dict[str, dict[str, int]],
        capacity: dict[str, int],
    ) -> None:
        self.cq_weight = {cq.name: cq.weight or 1.0 for cq in cluster_queues}
        self.lq_weight = {lq.name: lq.weight or 1.0 for lq in local_queues}
        self.lq_cq = {lq.name: lq.cluster_queue for lq in local_queues}
        cohort_of = {cq.name: cq.cohort for cq in cluster_queues}
        cohort_pool: dict[str, dict[str, int]] = {}
        for cq in cluster_queues:
            if cq.cohort:
                pool = cohort_pool.setdefault(cq.cohort, {})
                for key, amount in nominal.get(cq.name, {}).items():
                    pool[key] = pool.get(key, 0) + amount
        self.capacity = capacity
        self.cq_pool = {
            cq.name: cohort_pool.get(cohort_of[cq.name], {}) if cohort_of[cq.name] else nominal.get(cq.name, {})
            for cq in cluster_queues
        }
        self.lq_pool = {lq.name: nominal.get(lq.cluster_queue, {}) for lq in local_queues}
        self.cq_usage: dict[str, dict[str, int]] = {}
        self.lq_usage: dict[str, dict[str, int]] = {}
        self._cq_cache: dict[str, float] = {}
        self._lq_cache: dict[str, float] = {}
        # Change stamps: ``changes`` counts every change of usage; a queue's stamp is the count at its
        # last change (every queue's at least ``_all_changed``): a share read at stamp ``t`` is still
        # current while its queue's stamp is at most ``t`` (``unchanged_since``).
        self.changes = 0
        self._all_changed = 0
        self._cq_changed: dict[str, int] = {}
        self._lq_changed: dict[str, int] = {}

    def add(self, lq: str, cq: str, request: dict[str, int], sign: int = 1) -> None:
        for usage in (self.cq_usage.setdefault(cq, {}), self.lq_usage.setdefault(lq, {})):
            for key, amount in request.items():
                usage[key] = usage.get(key, 0) + sign * amount
        self._cq_cache.pop(cq, None)
        self._lq_cache.pop(lq, None)
        self.changes += 1
        self._cq_changed[cq] = self._lq_changed[lq] = self.changes

    def unchanged_since(self, stamp: int, lq: str, cq: str) -> bool:
        """Whether neither queue's usage changed after ``changes`` was ``stamp``."""
        return (
            self._all_changed <= stamp and self._cq_changed.get(cq, 0) <= stamp and self._lq_changed.get(lq, 0) <= stamp
        )

    def save_usage(self) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
        """A copy of the usage per ClusterQueue and LocalQueue, for :meth:`restore_usage`."""
        return {cq: dict(u) for cq, u in self.cq_usage.items()}, {lq: dict(u) for lq, u in self.lq_usage.items()}

    def restore_usage(self, saved: tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]) -> None:
        """Put back the usage :meth:`save_usage` copied (undoing every ``add`` since)."""
        cq_usage, lq_usage = saved
        self.cq_usage = {cq: dict(u) for cq, u in cq_usage.items()}
        self.lq_usage = {lq: dict(u) for lq, u in lq_usage.items()}
        self._cq_cache.clear()
        self._lq_cache.clear()
        self.changes += 1
        self._all_changed = self.changes

    def _share(self, usage: dict[str, int], pool: dict[str, int], weight: float) -> float:
        return weighted_dominant_share(usage, pool, self.capacity, weight)

    def cq_share(self, cq: str) -> float:
        share = self._cq_cache.get(cq)
        if share is None:
            share = self._share(self.cq_usage.get(cq, {}), self.cq_pool.get(cq, {}), self.cq_weight.get(cq, 1.0))
            self._cq_cache[cq] = share
        return share

    def lq_share(self, lq: str) -> float:
        share = self._lq_cache.get(lq)
        if share is None:
            share = self._share(self.lq_usage.get(lq, {}), self.lq_pool.get(lq, {}), self.lq_weight.get(lq, 1.0))
            self._lq_cache[lq] = share
        return share


def sort_key(fair: FairShare | None, job: Workload, borrows: bool = False) -> SortKey:
    """``job``'s place in the admission order as usage stands in ``fair`` (None: no fair sharing)."""
    if fair is None:
        return (-job.priority, borrows, 0.0, 0.0, job.created_at, job.id)
    lq = job.local_queue
    return (-job.priority, borrows, fair.cq_share(fair.lq_cq.get(lq, "")), fair.lq_share(lq), job.created_at, job.id)


class AdmissionOrder:
    """Yields pending workloads in admission order, re-ranking queues as usage changes.

    Across queues: priority first; then, when ``borrows`` is given, a job that fits its queue's
    nominal quota before one that would borrow (Kueue's rule); then fair share, submission, id.

    ``changes``: when ``borrows`` is given, what it reads (the ClusterQueue's quota usage) with its
    changes counted (``QuotaBook``); a key whose shares and borrowing did not change since it was taken
    is not taken again when popped (without ``changes``, a key with ``borrows`` always is)."""

    def __init__(
        self,
        pending: dict[str, list[Workload]],
        fair: FairShare,
        fair_sharing: bool = True,
        borrows: Callable[[Workload], bool] | None = None,
        changes: Changes | None = None,
    ) -> None:
        self.queues = {lq: sorted(jobs, key=lq_order_key) for lq, jobs in pending.items()}
        self.heads = dict.fromkeys(self.queues, 0)
        self.fair = fair
        self.fair_sharing = fair_sharing
        self.borrows = borrows
        self.changes = changes if borrows is not None else None
        # One flat tuple per queue: its head's ``SortKey``, the queue, and the stamps (fair share, quota)
        # its key was taken at. Flat, so the heap's comparisons walk one tuple, not a key tuple inside an
        # entry tuple (the same order: the key's fields, then the queue, then the stamps).
        self._heap: list[tuple[int, bool, float, float, float, str, str, int, int]] = []
        self.last_key: SortKey | None = None  # the key the job yielded last was taken with
        self.refresh()

    def _entry(self, lq: str) -> tuple[int, bool, float, float, float, str, str, int, int]:
        """The queue's heap entry as usage stands: its head's ``sort_key``, the queue, the stamps."""
        fair = self.fair
        stamps = (fair.changes, self.changes.changes if self.changes is not None else 0)
        job = self.queues[lq][self.heads[lq]]
        borrows = self.borrows(job) if self.borrows is not None else False
        return (*sort_key(fair if self.fair_sharing else None, job, borrows), lq, *stamps)

    def _current(self, lq: str, fair_stamp: int, quota_stamp: int) -> bool:
        """Whether what the queue's key reads has not changed since the stamps it was taken at."""
        cq = self.fair.lq_cq.get(lq, "")
        if self.borrows is not None and (self.changes is None or not self.changes.unchanged_since(quota_stamp, cq)):
            return False
        return not self.fair_sharing or self.fair.unchanged_since(fair_stamp, lq, cq)

    def refresh(self) -> None:
        self._heap[:] = [self._entry(lq) for lq in self.queues if self.heads[lq] < len(self.queues[lq])]
        heapq.heapify(self._heap)

    def __iter__(self) -> Iterator[Workload]:
        heap, queues, heads = self._heap, self.queues, self.heads
        while heap:
            entry = heapq.heappop(heap)
            lq = entry[6]
            if not self._current(lq, entry[7], entry[8]):
                fresh = self._entry(lq)
                if fresh[:6] != entry[:6]:
                    heapq.heappush(heap, fresh)
                    continue
            jobs = queues[lq]
            head = heads[lq]
            heads[lq] = head + 1
            self.last_key = entry[:6]
            yield jobs[head]
            # The queue's next job is keyed after this one's decision, which may raise the queue's
            # share: a key taken before it would be stale and popped once more for nothing.
            if head + 1 < len(jobs):
                heapq.heappush(heap, self._entry(lq))


def pending_limit_error(local_queue: LocalQueue, pending_count: int) -> str | None:
    """The error to show when submitting one more job to a full LocalQueue, else ``None``.

    ``pending_count`` is the number of jobs already pending in the queue (not counting the new one).
    """
    limit = local_queue.max_pending
    if limit is None or pending_count < limit:
        return None
    return (
        f"queue {local_queue.name} already has {pending_count} pending jobs, its limit is {limit}; "
        "wait for some to start or cancel one"
    )
