"""Estimated start times of the jobs a cycle leaves pending, like Slurm's ``squeue --start`` without
backfill.

1. Pools, each with what is free now and a ceiling (the most it could ever hold): per GPU model the
   milli-GPU of its schedulable plain nodes, and its MIG nodes as a pool of their own (neither kind of
   request can use the other's); CPU and memory of schedulable nodes; per ClusterQueue and resource
   with a quota, what the queue may still take (ceiling: its nominal quota plus what it may borrow).
2. Every running or just-admitted job releases what it holds at ``started_at + runtime_s`` (jobs past
   their requested runtime are assumed to end now; victims of a preemption release now). Only
   capacity on schedulable nodes goes back into a pool: what a cordoned or vanished node frees cannot
   start anything.
3. Pending jobs are taken in the order the cycle considered them. A job starts at the earliest time
   when, for each resource it needs (the GPU model's pool, its ClusterQueue's quota of it; CPU and
   memory only for CPU-only work), the free amount covers the request, and not before the previous job
   that used the same resource (no overtaking, so the estimate never promises what a higher-ranked job
   will take). With several GPU models allowed, the earliest of them wins.
4. It then holds those resources until ``start + runtime_s``.

Only GPU models whose nodes the job may use (static filters) and whose total could hold it are
considered. Device fragmentation is not modelled (free GPUs are pooled per model), so the estimate is
a lower bound for whole-GPU jobs on a fragmented cluster. A job whose request exceeds its pool or its
quota ceiling gets ``None``.

The pools and the walk are :class:`StartEstimator`; :func:`estimate_starts` builds them from a cycle's
state through the public API of ``Cluster``, ``QuotaBook`` and ``Placer``.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

import numpy as np

from .capacity import FULL, Cluster
from .model import ReplicaPlacement, Workload
from .placement import Placer
from .preemption import Holder
from .quota import CPU, MEMORY, QuotaBook, gpu_key, models_to_try, placements_request, request_of

Releases = dict[str, list[tuple[float, int]]]
"""Per pool, the ``(time, amount)`` it gets back."""


def estimate_starts(
    cluster: Cluster,
    quota: QuotaBook,
    placer: Placer,
    now: float,
    waiting: Sequence[tuple[Workload, str]],
    holders: Sequence[Holder],
    victims: Collection[str],
) -> dict[str, float | None]:
    """Estimated start of each ``(job, cluster queue)`` in ``waiting`` (in the cycle's order), given what
    ``holders`` (running and just admitted) hold and which of them are ``victims``; ``None`` = cannot
    estimate. Reads the cycle's final state; changes nothing."""
    return _Estimation(cluster, quota, placer, now).run(waiting, holders, victims)


class _Estimation:
    def __init__(self, cluster: Cluster, quota: QuotaBook, placer: Placer, now: float) -> None:
        self.cluster = cluster
        self.quota = quota
        self.placer = placer
        self.now = now
        self.schedulable = ~cluster.cordoned

    def run(
        self, waiting: Sequence[tuple[Workload, str]], holders: Sequence[Holder], victims: Collection[str]
    ) -> dict[str, float | None]:
        # 1. Pools.
        free, ceiling = self._pools()
        # Which job waits on what: only those resources need their release events.
        options = self._options(waiting)
        needed = {key for _, requests in options for request in requests for key in request}
        # 2. Releases.
        estimator = StartEstimator(self.now, free, ceiling)
        for key, items in self._releases(holders, victims, needed).items():
            estimator.preload_many(key, items)
        estimator.seal()
        # 3.-4. The walk, in the cycle's order.
        return {job.id: _earliest_option(estimator, requests, job.runtime_s) for job, requests in options}

    # -- 1. pools ---------------------------------------------------------------------------------

    def _pools(self) -> tuple[dict[str, int], dict[str, int]]:
        """(free now, ceiling) per pool: nodes per GPU model, CPU, memory; quota per queue."""
        cluster, schedulable = self.cluster, self.schedulable
        free: dict[str, int] = {
            CPU: int(cluster.cpu_free[schedulable].sum()),
            MEMORY: int(cluster.mem_free[schedulable].sum()),
        }
        ceiling: dict[str, int] = {
            CPU: int(cluster.cpu_total[schedulable].sum()),
            MEMORY: int(cluster.mem_total[schedulable].sum()),
        }
        for model, code in cluster.model_code.items():
            rows = schedulable & (cluster.node_model == code)
            plain, mig = rows & ~cluster.mig_node, rows & cluster.mig_node
            key = gpu_key(model)
            # Counted without the overcommit headroom of pooled devices (conservative for fractions).
            headroom = (cluster.dev_cap[plain] - FULL)[:, None]
            free[key] = int(np.clip(cluster.dev_free[plain] - headroom, 0, None).sum())
            ceiling[key] = int(cluster.gpu_count[plain].sum()) * FULL
            mig_key = _mig_pool(key)
            ceiling[mig_key] = int(cluster.gpu_count[mig].sum()) * FULL
            used_slices = sum(int(m).bit_count() for m in cluster.mig_mask[mig].ravel())
            free[mig_key] = ceiling[mig_key] - int(used_slices * FULL // 8)
        for cq, limits in self.quota.limits.items():
            for key in limits:
                available = self.quota.available(cq, key)
                free[_quota_pool(cq, key)] = available if available is not None else 0
                ceiling[_quota_pool(cq, key)] = self.quota.ceiling(cq, key) or 0
        return free, ceiling

    # -- what each job asks of the pools ----------------------------------------------------------

    def _options(self, waiting: Sequence[tuple[Workload, str]]) -> list[tuple[Workload, list[dict[str, int]]]]:
        """Each waiting job with its pooled request per GPU model it may use (shared by equal jobs)."""
        by_signature: dict[tuple[object, ...], list[dict[str, int]]] = {}
        out = []
        for job, cq in waiting:
            signature = (cq, job.resources, job.gang_size, job.allowed_gpu_models, job.node_selector, job.tolerations)
            requests = by_signature.get(signature)
            if requests is None:
                requests = by_signature[signature] = self._requests(job, cq)
            out.append((job, requests))
        return out

    def _requests(self, job: Workload, cq: str) -> list[dict[str, int]]:
        """The pooled request of ``job`` on each GPU model it may use, in flavor order."""
        options = []
        for gpu_model in models_to_try(job, self.quota.flavors[cq]):
            shape = self.placer.shape_for(job, gpu_model)
            if isinstance(shape, str):
                continue
            counts = self.cluster.gpu_count[self.placer.eligible(job, shape)]
            if shape.kind != "cpu" and (
                int(counts.sum()) * FULL < shape.quota_milli * job.gang_size or int(counts.max(initial=0)) < shape.gpus
            ):
                continue  # the nodes this job may use could never hold it on this model
            request = request_of(shape, job.gang_size)
            limits = self.quota.limits.get(cq, {})
            request.update({_quota_pool(cq, key): amount for key, amount in request.items() if key in limits})
            if shape.kind != "cpu":  # GPUs bind a GPU job; pooled CPU/memory would only add walks
                request.pop(CPU, None)
                request.pop(MEMORY, None)
            if shape.kind == "mig" and shape.gpu_model is not None:
                key = gpu_key(shape.gpu_model)
                request[_mig_pool(key)] = request.pop(key)
            options.append(request)
        return options

    # -- 2. releases ------------------------------------------------------------------------------

    def _releases(self, holders: Sequence[Holder], victims: Collection[str], needed: set[str]) -> Releases:
        cluster, now = self.cluster, self.now
        events: Releases = {key: [] for key in needed}
        quota_keys = {
            cq: {key: _quota_pool(cq, key) for key in limits if _quota_pool(cq, key) in needed}
            for cq, limits in self.quota.limits.items()
        }
        plain_nodes = self._node_names(self.schedulable & ~cluster.mig_node)
        mig_nodes = self._node_names(self.schedulable & cluster.mig_node)
        for holder in holders:
            w = holder.workload
            started = w.started_at if w.started_at is not None else now
            end = now if w.id in victims else max(now, started + w.runtime_s)
            qkeys = quota_keys.get(holder.cq, {})
            for key, amount in holder.request.items():
                quota_key = qkeys.get(key)
                if quota_key is not None:
                    events[quota_key].append((end, amount))
            released = holder.request
            if any(p.node not in plain_nodes for p in holder.placements):
                released = self._pooled(w, holder.placements, plain_nodes, mig_nodes)
            for key, amount in released.items():
                if key in events:
                    events[key].append((end, amount))
        return events

    def _node_names(self, rows: np.ndarray) -> set[str]:
        return {n.name for n, ok in zip(self.cluster.nodes, rows.tolist(), strict=True) if ok}

    def _pooled(
        self, w: Workload, placements: Sequence[ReplicaPlacement], plain_nodes: set[str], mig_nodes: set[str]
    ) -> dict[str, int]:
        """What ``placements`` give back to the pools: nothing from unschedulable or vanished nodes,
        and MIG nodes' GPUs to their model's MIG pool."""
        released = placements_request(self.cluster, w.gpu_model, [p for p in placements if p.node in plain_nodes])
        on_mig = placements_request(self.cluster, w.gpu_model, [p for p in placements if p.node in mig_nodes])
        for key, amount in on_mig.items():
            pooled = _mig_pool(key) if key.startswith("gpu/") else key
            released[pooled] = released.get(pooled, 0) + amount
        return released


def _earliest_option(estimator: StartEstimator, requests: list[dict[str, int]], runtime_s: float) -> float | None:
    """Steps 3-4 for one job: the option that can start first (the first of equals) is reserved."""
    best: tuple[float, dict[str, int]] | None = None
    for request in requests:
        start = estimator.earliest(request)
        if start is not None and (best is None or start < best[0]):
            best = (start, request)
    if best is None:
        return None
    return estimator.start(best[1], runtime_s)


def _mig_pool(key: str) -> str:
    """The pool of a GPU model's MIG nodes (``key`` is the model's ``gpu_key``)."""
    return f"{key}@mig"


def _quota_pool(cq: str, key: str) -> str:
    """The pool of a ClusterQueue's quota of ``key``."""
    return f"{cq}|{key}"


@dataclass(slots=True)
class StartEstimator:
    """Release-event simulation over pooled resources (steps 2-4 of the module docstring).

    Each resource keeps its future releases as a sorted list with a read head, so the walk in
    :meth:`start` only visits releases it then consumes: the whole pass is O(events log events).
    """

    now: float
    free: dict[str, int]
    ceiling: dict[str, int]
    events: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    head: dict[str, int] = field(default_factory=dict)
    clock: dict[str, float] = field(default_factory=dict)
    pending_total: dict[str, int] = field(default_factory=dict)  # sum of releases not yet consumed

    def preload_many(self, resource: str, items: list[tuple[float, int]]) -> None:
        """Many releases of one resource at once (``(at, amount)``); call :meth:`seal` after."""
        now = self.now
        self.events.setdefault(resource, []).extend((at if at > now else now, amount) for at, amount in items)
        self.pending_total[resource] = self.pending_total.get(resource, 0) + sum(a for _, a in items)

    def seal(self) -> None:
        for events in self.events.values():
            events.sort()

    def release(self, resource: str, at: float, amount: int) -> None:
        if amount:
            self.pending_total[resource] = self.pending_total.get(resource, 0) + amount
            bisect.insort(
                self.events.setdefault(resource, []),
                (max(at, self.now), amount),
                lo=self.head.get(resource, 0),
            )

    def ready_at(self, resource: str, need: int) -> float | None:
        """When ``need`` of ``resource`` is free, after every earlier reservation; ``None`` = never
        (more than the pool's ceiling, or more than every known release frees)."""
        free = self.free.get(resource, 0)
        if need > self.ceiling.get(resource, free):
            return None
        at = self.clock.get(resource, self.now)
        if free >= need:
            return at
        if free + self.pending_total.get(resource, 0) < need:
            return None  # even every known release is not enough: no walk
        events = self.events.get(resource, [])
        for j in range(self.head.get(resource, 0), len(events)):
            when, amount = events[j]
            free += amount
            if free >= need:
                return max(at, when)
        return None

    def earliest(self, request: dict[str, int]) -> float | None:
        """Earliest start for ``request`` after all earlier reservations, without reserving it."""
        start = self.now
        for resource, need in request.items():
            if need <= 0:
                continue
            ready = self.ready_at(resource, need)
            if ready is None:
                return None
            start = max(start, ready)
        return start

    def start(self, request: dict[str, int], runtime_s: float) -> float | None:
        """Earliest start for ``request`` after all earlier jobs; reserves it when one exists."""
        request = {r: a for r, a in request.items() if a > 0}
        start = self.earliest(request)
        if start is None:
            return None
        for resource, need in request.items():
            events = self.events.get(resource, [])
            j = self.head.get(resource, 0)
            free = self.free.get(resource, 0)
            consumed = 0
            while j < len(events) and events[j][0] <= start:
                consumed += events[j][1]
                j += 1
            free += consumed
            self.pending_total[resource] = self.pending_total.get(resource, 0) - consumed
            self.head[resource] = j
            self.free[resource] = free - need
            self.clock[resource] = start
            self.release(resource, start + runtime_s, need)
        return start
