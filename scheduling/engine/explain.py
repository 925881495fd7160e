"""Reasons with numbers, and estimated start times.

Reasons are built here so their wording is in one place. Estimated starts follow Slurm's
``squeue --start`` without backfill:

1. Every running or just-admitted job releases its resources at ``started_at + runtime_s`` (jobs past
   their requested runtime are assumed to end now; victims of a preemption release now).
2. Pending jobs are taken in the order the cycle considered them. A job starts at the earliest time
   when, for each resource it needs (the GPU model's free milli-GPU across schedulable nodes, CPU,
   memory, and its ClusterQueue's quota for each), the free amount covers the request, and not before
   the previous job that used the same resource (no overtaking, so the estimate never promises what a
   higher-ranked job will take).
3. It then holds those resources until ``start + runtime_s``.

Device fragmentation is not modelled (free GPUs are pooled per model), so the estimate is a lower
bound for whole-GPU jobs on a fragmented cluster. A job whose request exceeds the pool or its quota
ceiling gets ``None``.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from .model import Reason, ReasonKind


def quota_reason(
    cq: str,
    cohort: str,
    resource: str,
    used: int,
    nominal: int,
    requested: int,
    borrowable: int,
) -> Reason:
    name, scale, unit = _resource_words(resource)
    message = (
        f"quota: queue {cq} uses {_fmt(used, scale)} of {_fmt(nominal, scale)} {unit}{name}"
        f" and needs {_fmt(requested, scale)} more"
    )
    message += f"; cohort {cohort} has {_fmt(borrowable, scale)} borrowable" if cohort else "; no cohort"
    return Reason(
        ReasonKind.QUOTA,
        message,
        (
            ("cluster_queue", cq),
            ("resource", resource),
            ("used", used),
            ("nominal", nominal),
            ("requested", requested),
            ("borrowable", borrowable),
        ),
    )


def _resource_words(resource: str) -> tuple[str, int, str]:
    if resource.startswith("gpu/"):
        return resource[4:] + " GPUs", 1000, ""
    if resource == "cpu":
        return "CPU cores", 1000, ""
    return "GiB memory", 1024, ""


def _fmt(value: int, scale: int) -> str:
    return f"{value / scale:g}"


def placement_reason(
    total: int, fitting: int, counts: tuple[tuple[str, int], ...], prefix: str = "placement"
) -> Reason:
    parts = ", ".join(f"{n} {what}" for what, n in counts)
    message = f"{prefix}: {fitting} of {total} nodes fit" + (f": {parts}" if parts else "")
    details: tuple[tuple[str, int | float | str], ...] = (("nodes", total), ("fit", fitting), *counts)
    return Reason(ReasonKind.PLACEMENT, message, details)


def gang_reason(placed: int, needed: int, total: int, counts: tuple[tuple[str, int], ...]) -> Reason:
    inner = placement_reason(total, 0, counts, prefix="next replica")
    message = f"gang: only {placed} of {needed} replicas fit and all {needed} must start together; {inner.message}"
    return Reason(ReasonKind.GANG, message, (("placed", placed), ("needed", needed), *inner.details))


@dataclass(slots=True)
class StartEstimator:
    """Release-event simulation over pooled resources (see the module docstring).

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

    def _ready_at(self, resource: str, need: int) -> float | None:
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

    def start(self, request: dict[str, int], runtime_s: float) -> float | None:
        """Earliest start for ``request`` after all earlier jobs; reserves it when one exists."""
        request = {r: a for r, a in request.items() if a > 0}
        start = self.now
        for resource, need in request.items():
            ready = self._ready_at(resource, need)
            if ready is None:
                return None
            start = max(start, ready)
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
