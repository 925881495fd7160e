"""Quota accounting per ClusterQueue and resource, with cohort borrowing and lending (Kueue's model).

Resources are keyed ``gpu/<model>`` (milli-GPU), ``cpu`` (milli-cores) and ``memory`` (MiB). For a
ClusterQueue ``q`` and resource ``r`` with nominal ``n``, usage ``u``, borrowing limit ``b`` and lending
limit ``l`` (``None`` = unlimited):

1. ``guaranteed = n - min(n, l)`` is never lent; ``lendable = min(n, l)`` goes into the cohort pool.
2. The pool holds ``sum(lendable)`` over the cohort; it is used by ``sum(max(0, u - guaranteed))``.
3. ``q`` may add ``x`` when ``max(0, u + x - guaranteed) - max(0, u - guaranteed)`` fits in the pool's
   free part and ``u + x <= n + b``.
4. A queue without a cohort may use exactly its nominal quota.

A ClusterQueue may only use GPU models it lists as flavors. CPU or memory without a quota is unlimited.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .capacity import Cluster
from .fit import Shape
from .model import ClusterQueue, ReplicaPlacement, Workload
from .shares import placement_quota_milli

CPU = "cpu"
MEMORY = "memory"


def gpu_key(model: str) -> str:
    return f"gpu/{model}"


def request_of(shape: Shape, count: int) -> dict[str, int]:
    """Quota charge of ``count`` replicas of ``shape``, by resource key (zero amounts left out)."""
    request: dict[str, int] = {}
    if shape.gpu_model is not None and shape.quota_milli:
        request[gpu_key(shape.gpu_model)] = shape.quota_milli * count
    if shape.cpu_milli:
        request[CPU] = shape.cpu_milli * count
    if shape.memory_mib:
        request[MEMORY] = shape.memory_mib * count
    return request


def placements_request(
    cluster: Cluster, gpu_model: str | None, placements: Sequence[ReplicaPlacement]
) -> dict[str, int]:
    """What ``placements`` hold, by resource key (zero amounts left out); ``gpu_model`` is the
    workload's, else each placement's node's.

    A GPU holds its quota share (``shares``); a MIG slice whose geometry is unknown on its device
    holds none here (the engine could never have placed it, so it cannot account for it).
    """
    request: dict[str, int] = {}
    for p in placements:
        model = gpu_model or _model_of(cluster, p.node)
        if p.gpu_indices and model:
            memory = cluster.memory_of(model) if p.mig_profile else 0  # only a MIG slice's share depends on it
            if p.mig_profile and cluster.mig(p.mig_profile, memory) is None:
                milli = 0
            else:
                milli = placement_quota_milli(p, memory)
            key = gpu_key(model)
            request[key] = request.get(key, 0) + milli
        request[CPU] = request.get(CPU, 0) + p.cpu_milli
        request[MEMORY] = request.get(MEMORY, 0) + p.memory_mib
    return {k: v for k, v in request.items() if v}


def _model_of(cluster: Cluster, node: str) -> str | None:
    i = cluster.index.get(node)
    return None if i is None else cluster.nodes[i].gpu_model


def models_to_try(workload: Workload, flavors: Sequence[str]) -> list[str | None]:
    """The GPU models ``workload`` may use in a ClusterQueue with ``flavors``, in flavor order
    (``[None]`` for CPU-only work)."""
    if not workload.wants_gpu:
        return [None]
    if workload.allowed_gpu_models:
        allowed = set(workload.allowed_gpu_models)
        return [m for m in flavors if m in allowed]
    return list(flavors)


@dataclass(slots=True)
class _Limit:
    nominal: int
    borrowing_limit: int | None
    lending_limit: int | None
    lendable: int = field(init=False)  # goes into the cohort pool
    guaranteed: int = field(init=False)  # never lent

    def __post_init__(self) -> None:
        self.lendable = self.nominal if self.lending_limit is None else min(self.nominal, self.lending_limit)
        self.guaranteed = self.nominal - self.lendable


class QuotaBook:
    """Usage and limits of every ClusterQueue; cheap incremental updates during a cycle."""

    def __init__(self, cluster_queues: tuple[ClusterQueue, ...]) -> None:
        self.queues: dict[str, ClusterQueue] = {cq.name: cq for cq in cluster_queues}
        self.limits: dict[str, dict[str, _Limit]] = {}
        self.usage: dict[str, dict[str, int]] = {}
        self.cohort_members: dict[str, list[str]] = {}
        for cq in cluster_queues:
            limits: dict[str, _Limit] = {}
            for flavor in cq.flavors:
                limits[gpu_key(flavor.gpu_model)] = _Limit(
                    flavor.nominal_gpus * 1000,
                    None if flavor.borrowing_limit is None else flavor.borrowing_limit * 1000,
                    None if flavor.lending_limit is None else flavor.lending_limit * 1000,
                )
            if cq.cpu_milli is not None:
                limits[CPU] = _Limit(cq.cpu_milli, cq.cpu_borrowing_limit_milli, cq.cpu_lending_limit_milli)
            if cq.memory_mib is not None:
                limits[MEMORY] = _Limit(cq.memory_mib, cq.memory_borrowing_limit_mib, cq.memory_lending_limit_mib)
            self.limits[cq.name] = limits
            self.usage[cq.name] = {}
            if cq.cohort:
                self.cohort_members.setdefault(cq.cohort, []).append(cq.name)
        self.flavors: dict[str, tuple[str, ...]] = {
            cq.name: tuple(f.gpu_model for f in cq.flavors) for cq in cluster_queues
        }
        # (cohort, key) -> pool capacity, pool use
        self._pool_cap: dict[tuple[str, str], int] = {}
        self._pool_used: dict[tuple[str, str], int] = {}
        for cohort, members in self.cohort_members.items():
            for member in members:
                for key, limit in self.limits[member].items():
                    self._pool_cap[(cohort, key)] = self._pool_cap.get((cohort, key), 0) + limit.lendable
        # Change stamps (as ``admission.FairShare``'s): ``changes`` counts every change of usage; a
        # queue's stamp is the count at its last change of its own usage (every queue's at least
        # ``_all_changed``).
        self.changes = 0
        self._all_changed = 0
        self._changed: dict[str, int] = {}
        self._cohort_changed: dict[str, int] = {}  # per cohort: the count at the last change of a member's usage

    # -- queries ----------------------------------------------------------------------------------

    def used(self, cq: str, key: str) -> int:
        return self.usage.get(cq, {}).get(key, 0)

    def nominal(self, cq: str, key: str) -> int | None:
        limit = self.limits.get(cq, {}).get(key)
        return None if limit is None else limit.nominal

    def _in_cohort(self, cq: str) -> str:
        queue = self.queues.get(cq)
        return queue.cohort if queue is not None and queue.cohort else ""

    def pool_free(self, cq: str, key: str) -> int:
        cohort = self._in_cohort(cq)
        if not cohort:
            return 0
        return self._pool_cap.get((cohort, key), 0) - self._pool_used.get((cohort, key), 0)

    def available(self, cq: str, key: str) -> int | None:
        """How much more of ``key`` the queue may take now; ``None`` = unlimited."""
        limit = self.limits.get(cq, {}).get(key)
        if limit is None:
            return None if key in (CPU, MEMORY) else 0
        return self._free(limit, self.used(cq, key), self._in_cohort(cq), key)

    def _free(self, limit: _Limit, used: int, cohort: str, key: str) -> int:
        """:meth:`available` of a queue with this ``limit`` and ``used`` in ``cohort`` ("" for none)."""
        # Conditionals rather than max/min calls: the same whole numbers, on a hot path.
        if not cohort:
            free = limit.nominal - used
            return free if free > 0 else 0
        own = limit.guaranteed - used
        pool_key = (cohort, key)
        pool = self._pool_cap.get(pool_key, 0) - self._pool_used.get(pool_key, 0)
        room = (own if own > 0 else 0) + (pool if pool > 0 else 0)
        if limit.borrowing_limit is not None:
            ceiling = limit.nominal + limit.borrowing_limit - used
            room = ceiling if ceiling < room else room
        return room if room > 0 else 0

    def room(self, cq: str, key: str, borrow: bool) -> int | None:
        """:meth:`available`, capped at the unused nominal quota unless ``borrow``; fused for speed.

        0 for a GPU model the queue does not list, ``None`` for CPU/memory without a quota.
        """
        return self._room(self.limits.get(cq, {}), self.usage.get(cq, {}), self._in_cohort(cq), key, borrow)

    def _room(
        self, limits: dict[str, _Limit], usage: dict[str, int], cohort: str, key: str, borrow: bool
    ) -> int | None:
        """:meth:`room` of a queue with these ``limits`` and ``usage`` in ``cohort``."""
        limit = limits.get(key)
        if limit is None:
            return None if key in (CPU, MEMORY) else 0
        used = usage.get(key, 0)
        available = self._free(limit, used, cohort, key)
        if not borrow:  # within the nominal quota: its unused part caps :meth:`available`
            return max(0, min(available, limit.nominal - used))
        return available

    def ceiling(self, cq: str, key: str) -> int | None:
        """The most of ``key`` the queue could ever hold (the rest of its cohort idle): its nominal
        quota plus what it may borrow; ``None`` when it has no quota for ``key``."""
        limit = self.limits.get(cq, {}).get(key)
        if limit is None:
            return None
        cohort = self._in_cohort(cq)
        if not cohort:
            return limit.nominal
        others = self._pool_cap.get((cohort, key), 0) - limit.lendable
        extra = others if limit.borrowing_limit is None else min(others, limit.borrowing_limit)
        return limit.nominal + max(0, extra)

    def borrowable(self, cq: str, key: str) -> int:
        """The part of :meth:`available` beyond the queue's own unused nominal quota."""
        available = self.available(cq, key)
        nominal = self.nominal(cq, key) or 0
        if available is None:
            return 0
        return max(0, available - max(0, nominal - self.used(cq, key)))

    def fits(self, cq: str, request: dict[str, int]) -> bool:
        """Whether :meth:`available` has room for every amount of ``request`` (inlined: victim selection
        asks after every change)."""
        limits, usage, cohort = self.limits.get(cq, {}), self.usage.get(cq, {}), self._in_cohort(cq)
        for key, amount in request.items():
            if amount <= 0:
                continue
            limit = limits.get(key)
            if limit is None:
                if key in (CPU, MEMORY):
                    continue  # no quota: unlimited
                return False  # a GPU model the queue does not list: nothing available
            if amount > self._free(limit, usage.get(key, 0), cohort, key):
                return False
        return True

    def borrowing(self, cq: str, key: str) -> bool:
        nominal = self.nominal(cq, key)
        return nominal is not None and self.used(cq, key) > nominal

    def would_borrow(self, cq: str, request: dict[str, int]) -> bool:
        limits = self.limits.get(cq, {})  # :meth:`nominal` and :meth:`used` inlined (a hot path)
        usage = self.usage.get(cq, {})
        for key, amount in request.items():
            limit = limits.get(key)
            if limit is not None and amount > 0 and usage.get(key, 0) + amount > limit.nominal:
                return True
        return False

    # -- updates ----------------------------------------------------------------------------------

    def unchanged_since(self, stamp: int, cq: str) -> bool:
        """Whether the queue's own usage did not change after ``changes`` was ``stamp`` (what
        :meth:`would_borrow` reads besides the fixed limits)."""
        return self._all_changed <= stamp and self._changed.get(cq, 0) <= stamp

    def room_unchanged_since(self, stamp: int, cq: str) -> bool:
        """Whether neither the queue's usage nor its cohort's (the pool it may borrow from) changed after
        ``changes`` was ``stamp``: what :meth:`replicas_with_room` and :meth:`room_for_all` read besides
        the fixed limits."""
        if self._all_changed > stamp or self._changed.get(cq, 0) > stamp:
            return False
        cohort = self._in_cohort(cq)
        return not cohort or self._cohort_changed.get(cohort, 0) <= stamp

    def add(self, cq: str, request: dict[str, int], sign: int = 1) -> None:
        self.changes += 1
        self._changed[cq] = self.changes
        usage = self.usage.setdefault(cq, {})
        cohort = self._in_cohort(cq)
        if cohort:
            self._cohort_changed[cohort] = self.changes
        limits = self.limits.get(cq, {})
        pool_used = self._pool_used
        for key, amount in request.items():
            if not amount:
                continue
            before = usage.get(key, 0)
            after = before + sign * amount
            usage[key] = after
            limit = limits.get(key) if cohort else None
            if limit is not None:
                # What the queue takes from the pool: its use beyond the guaranteed part.
                guaranteed = limit.guaranteed
                delta = (after - guaranteed if after > guaranteed else 0) - (
                    before - guaranteed if before > guaranteed else 0
                )
                pool_key = (cohort, key)
                pool_used[pool_key] = pool_used.get(pool_key, 0) + delta

    def save_usage(self) -> tuple[dict[str, dict[str, int]], dict[tuple[str, str], int]]:
        """A copy of the usage (per queue and per cohort pool), for :meth:`restore_usage`."""
        return {cq: dict(usage) for cq, usage in self.usage.items()}, dict(self._pool_used)

    def restore_usage(self, saved: tuple[dict[str, dict[str, int]], dict[tuple[str, str], int]]) -> None:
        """Put back the usage :meth:`save_usage` copied (undoing every ``add`` since)."""
        usage, pool_used = saved
        self.usage = {cq: dict(amounts) for cq, amounts in usage.items()}
        self._pool_used = dict(pool_used)
        self.changes += 1
        self._all_changed = self.changes

    def replicas_with_room(self, cq: str, per_replica: dict[str, int], replicas: int, borrow: bool) -> int:
        """How many replicas (up to ``replicas``) of ``per_replica`` each the queue's quota allows now
        (within nominal unless ``borrow``)."""
        count = replicas
        limits, usage, cohort = self.limits.get(cq, {}), self.usage.get(cq, {}), self._in_cohort(cq)
        for key, amount in per_replica.items():
            room = self._room(limits, usage, cohort, key, borrow)
            if room is not None:
                count = min(count, room // amount)
        return count

    def room_for_all(self, cq: str, request: dict[str, int], replicas: int, borrow: bool) -> int:
        """All ``replicas`` when the queue has room for the whole ``request`` now (within nominal unless
        ``borrow``), else 0: a gang of several pod sets is admitted whole."""
        limits, usage, cohort = self.limits.get(cq, {}), self.usage.get(cq, {}), self._in_cohort(cq)
        for key, amount in request.items():
            room = self._room(limits, usage, cohort, key, borrow)
            if room is not None and room < amount:
                return 0
        return replicas
