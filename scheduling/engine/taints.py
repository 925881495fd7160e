"""Taints and tolerations, by Kubernetes' rules, and the allow-list of what a team may tolerate.

``tolerates`` is Kubernetes' ``Toleration.ToleratesTaint``:

1. a toleration with an effect tolerates only taints of that effect (no effect: every effect);
2. a toleration with a key tolerates only taints of that key (no key: every key);
3. operator ``Exists`` then tolerates; ``Equal`` (or no operator) only when the values are equal.

A node's ``NoSchedule`` and ``NoExecute`` taints must all be tolerated (the TaintToleration filter);
``PreferNoSchedule`` taints only lower a node's score, by how many of them are not tolerated.

``toleration_allowed`` is the platform's allow-list (``portal.tenants`` keeps the grants): the submit
path refuses a toleration no grant covers, and the engine, given the grants in its snapshot, ignores
one (defence in depth: a row written around the submit path still cannot reach a dedicated node).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from .model import Snapshot, Taint, Toleration, TolerationGrant, Workload, WorkloadState

HARD_EFFECTS = ("NoSchedule", "NoExecute")
SOFT_EFFECT = "PreferNoSchedule"


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """Kubernetes' ``ToleratesTaint``."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator == "Exists":
        return True
    if toleration.operator in ("", "Equal"):
        return toleration.value == taint.value
    return False


def tolerated(tolerations: Iterable[Toleration], taint: Taint) -> bool:
    return any(tolerates(t, taint) for t in tolerations)


def untolerated_hard(tolerations: tuple[Toleration, ...], taints: tuple[Taint, ...]) -> bool:
    """Whether some ``NoSchedule``/``NoExecute`` taint of ``taints`` is not tolerated."""
    return any(t.effect in HARD_EFFECTS and not tolerated(tolerations, t) for t in taints)


def untolerated_soft(tolerations: tuple[Toleration, ...], taints: tuple[Taint, ...]) -> int:
    """How many ``PreferNoSchedule`` taints of ``taints`` are not tolerated (TaintToleration's score)."""
    return sum(1 for t in taints if t.effect == SOFT_EFFECT and not tolerated(tolerations, t))


def toleration_allowed(toleration: Toleration, grants: Iterable[TolerationGrant]) -> bool:
    """Whether a grant covers everything ``toleration`` tolerates:

    - ``all``: any toleration, including the empty-key ``Exists`` that tolerates every taint;
    - otherwise the toleration's key must be the grant's key (an empty-key toleration needs ``all``);
    - a grant's empty value allows any value (``Exists``, or ``Equal`` to anything); otherwise the
      toleration must be ``Equal`` to that value;
    - a grant's empty effect allows any effect; otherwise the toleration's effect must be that effect
      (a toleration with no effect tolerates every effect, so it needs a grant for any effect).
    """
    operator = toleration.operator or "Equal"
    for grant in grants:
        if grant.all:
            return True
        if not toleration.key or toleration.key != grant.key:
            continue
        if grant.value and (operator != "Equal" or toleration.value != grant.value):
            continue
        if grant.effect and toleration.effect != grant.effect:
            continue
        return True
    return False


def allowed_tolerations(
    tolerations: tuple[Toleration, ...], grants: tuple[TolerationGrant, ...]
) -> tuple[Toleration, ...]:
    """The tolerations of ``tolerations`` some grant covers, in their order."""
    return tuple(t for t in tolerations if toleration_allowed(t, grants))


def granted_snapshot(snapshot: Snapshot) -> Snapshot:
    """The snapshot with each pending job's tolerations cut to those its team was granted (when the
    snapshot carries the allow-list); the recent submissions the forecast expects again too."""
    if snapshot.toleration_grants is None:
        return snapshot
    grants = dict(snapshot.toleration_grants)
    kept: dict[tuple[str, tuple], tuple] = {}

    def cut(jobs: tuple[Workload, ...], every: bool) -> tuple[Workload, ...] | None:
        out = list(jobs)
        changed = False
        for i, w in enumerate(out):
            if w.tolerations and (every or w.state == WorkloadState.PENDING):
                key = (w.team, w.tolerations)
                if key not in kept:
                    kept[key] = allowed_tolerations(w.tolerations, grants.get(w.team, ()))
                if kept[key] != w.tolerations:
                    out[i] = replace(w, tolerations=kept[key])
                    changed = True
        return tuple(out) if changed else None

    workloads = cut(snapshot.workloads, every=False)
    recent = cut(snapshot.recent, every=True)  # any state: each is expected again as a pending job
    if workloads is None and recent is None:
        return snapshot
    return replace(snapshot, workloads=workloads or snapshot.workloads, recent=recent or snapshot.recent)
