"""Workloads of several pod sets admitted as one gang (a Ray cluster: its head and worker groups).

A workload's own replicas are its first pod set; ``Workload.pod_sets`` are the others. The cycle
(``cycle._Cycle._try_model``) admits them all or none:

1. each further set is a workload of its own (``member``: the job's queue, selectors, tolerations and
   rules, the set's shape and count, every replica required) on the admission's GPU model when it
   asks for GPUs, and on any node when it does not;
2. quota: the whole request (the workload's own replicas plus every set) must fit the queue's room;
3. placement: the workload's own replicas, then each set in order, in one ``Statement``; the first
   set that does not fit whole discards them all, with a ``gang`` reason naming it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from .capacity import Statement
from .fit import Shape
from .model import PodSet, Reason, ReasonKind, ReplicaPlacement, Workload
from .placement import GangResult
from .quota import request_of


@dataclass(frozen=True, slots=True)
class Member:
    """One further pod set, as the placer sees it."""

    workload: Workload
    shape: Shape


def member(workload: Workload, pod_set: PodSet) -> Workload:
    """Step 1: the pod set as a workload of its own, every replica required."""
    return replace(
        workload,
        id=f"{workload.id}/{pod_set.name}",
        resources=pod_set.resources,
        replicas=pod_set.replicas,
        min_available=0,
        pod_sets=(),
    )


def never_fits(workload: Workload, check: Callable[[Workload], Reason | None]) -> Reason | None:
    """``check`` (the cycle's "never fits" test) of the workload's own replicas, then of each further
    set as its own workload: the first reason, naming the set."""
    never = check(workload)
    for pod_set in workload.pod_sets if never is None else ():
        never = check(member(workload, pod_set))
        if never is not None:
            return replace(never, message=f"pod set {pod_set.name}: {never.message}")
    return never


def members(
    workload: Workload, model: str | None, shape_for: Callable[[Workload, str | None], Shape | str]
) -> tuple[Member, ...] | str:
    """Step 1 for every further set on GPU ``model``, or why one cannot exist there."""
    out = []
    for pod_set in workload.pod_sets:
        w = member(workload, pod_set)
        shape = shape_for(w, model if pod_set.resources.wants_gpu else None)
        if isinstance(shape, str):
            return f"pod set {pod_set.name}: {shape}"
        out.append(Member(w, shape))
    return tuple(out)


def total_request(request: dict[str, int], more: Iterable[Member]) -> dict[str, int]:
    """Step 2: ``request`` (the workload's own replicas) plus every further set's, by resource key."""
    total = dict(request)
    for m in more:
        for key, amount in request_of(m.shape, m.workload.replicas).items():
            total[key] = total.get(key, 0) + amount
    return total


def place(
    sets: Iterable[Member],
    stmt: Statement,
    place_gang: Callable[..., GangResult],
) -> tuple[tuple[ReplicaPlacement, ...], Reason | None]:
    """Step 3 after the workload's own replicas were staged in ``stmt``: every further set, whole.

    Returns the sets' placements, or ``((), reason)`` with ``stmt`` discarded when one does not fit."""
    placements: list[ReplicaPlacement] = []
    for m in sets:
        w = m.workload
        # A statement of its own: a one-domain gang discards its statement between the domains it
        # tries, which must not undo the sets placed before it.
        own = Statement(stmt.cluster)
        result = place_gang(w, m.shape, own, w.replicas, w.replicas, explain=False)
        stmt.ops.extend(own.ops)  # the caller commits or discards them all
        if result.explanation is not None:
            stmt.discard()
            name = w.id.rpartition("/")[2]
            message = (
                f"gang: pod set {name} ({w.replicas} pod(s)) does not fit alongside the others, "
                "and all pod sets must start together"
            )
            return (), Reason(ReasonKind.GANG, message, (("pod_set", name), ("waits_for", "capacity")))
        placements.extend(result.placements)
    return tuple(placements), None
