"""Where every queue stands: quota, borrowing, lending, pending demand and fair share, from a snapshot.

What the Queues page and ``GET /api/v1/fairness/`` show, computed with the cycle's own rules so the
page and the scheduler cannot disagree:

1. Usage: every admitted or running workload holds ``quota.placements_request`` of its placements
   (its request, ``quota.request_of``, when it has none), in milli-GPU per GPU model, milli-CPU and
   MiB, charged to its LocalQueue and that queue's ClusterQueue, exactly as the cycle loads it.
2. Per ClusterQueue and resource: ``nominal``; ``used``; ``borrowed = max(0, used - nominal)``;
   ``lent``: the cohort's borrowed total split over its members in proportion to the nominal quota
   each leaves unused and may lend, ``min(lendable, max(0, nominal - used))`` (a cohort's borrowing
   comes out of the unused lendable quota of its other members; which member's quota a borrower
   takes is not recorded, so the split is proportional); ``pending``: the pending workloads' demand,
   each charged to the first GPU model of the queue's flavor order it may use (the one the cycle tries
   first), ``fit.shape_of`` times its replicas.
3. Per cohort: the sums of its members.
4. Fair share: ``admission.weighted_dominant_share`` of each ClusterQueue's usage over its cohort's
   summed nominal quota and of each LocalQueue's usage over its ClusterQueue's nominal quota (the
   ``admission.FairShare`` the cycle orders admission with), with the dominant resource named.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import podsets
from .admission import FairShare, dominant_resource
from .capacity import Cluster
from .fit import shape_of
from .holdings import held
from .model import Snapshot, Workload, WorkloadState
from .pools import FULL
from .quota import CPU, MEMORY, QuotaBook, gpu_key, models_to_try, request_of


@dataclass(frozen=True, slots=True)
class ResourceStanding:
    """One resource of one ClusterQueue (or cohort), in engine units (milli-GPU, milli-CPU, MiB)."""

    key: str  # gpu/<model>, cpu, memory
    nominal: int
    used: int
    borrowed: int
    lent: int
    pending: int


@dataclass(frozen=True, slots=True)
class QueueStanding:
    name: str
    cohort: str
    weight: float
    share: float  # weighted dominant share within its cohort
    dominant: str  # the resource key that sets it ("" when nothing is used)
    resources: tuple[ResourceStanding, ...]


@dataclass(frozen=True, slots=True)
class LocalStanding:
    name: str  # the engine's LocalQueue key
    team: str
    cluster_queue: str
    weight: float
    share: float  # weighted dominant share within its ClusterQueue
    dominant: str
    used: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class Standings:
    cluster_queues: tuple[QueueStanding, ...]
    cohorts: tuple[QueueStanding, ...]  # share 0: cohorts are not ranked against each other
    local_queues: tuple[LocalStanding, ...]


def capacity_totals(cluster: Cluster) -> dict[str, int]:
    """The cluster's capacity per resource key (what a resource without quota is measured against)."""
    capacity = {CPU: int(cluster.cpu_total.sum()), MEMORY: int(cluster.mem_total.sum())}
    for model, code in cluster.model_code.items():
        capacity[gpu_key(model)] = int(cluster.gpu_count[cluster.node_model == code].sum()) * FULL
    return capacity


def _add(into: dict[str, int], request: dict[str, int]) -> None:
    for key, amount in request.items():
        into[key] = into.get(key, 0) + amount


def queue_standings(snapshot: Snapshot) -> Standings:
    """Every ClusterQueue's, cohort's and LocalQueue's standing (see the module docstring)."""
    cluster = Cluster(snapshot)
    book = QuotaBook(snapshot.cluster_queues)
    nominal = {cq: {key: limit.nominal for key, limit in limits.items()} for cq, limits in book.limits.items()}
    fair = FairShare(snapshot.cluster_queues, snapshot.local_queues, nominal, capacity_totals(cluster))
    lq_cq = {lq.name: lq.cluster_queue for lq in snapshot.local_queues}
    mig_profiles = dict(snapshot.mig_profiles)
    used: dict[str, dict[str, int]] = {cq.name: {} for cq in snapshot.cluster_queues}
    pending: dict[str, dict[str, int]] = {cq.name: {} for cq in snapshot.cluster_queues}
    lq_used: dict[str, dict[str, int]] = {lq.name: {} for lq in snapshot.local_queues}
    # 1. Usage and pending demand.
    for w in snapshot.workloads:
        name = lq_cq.get(w.local_queue)
        if name is None or name not in used:
            continue
        if w.state == WorkloadState.PENDING:
            _add(pending[name], _demand(cluster, mig_profiles, book, name, w))
            continue
        request = held(w, cluster, lambda m, model: shape_of(cluster, mig_profiles, m.resources, model))
        _add(used[name], request)
        _add(lq_used.setdefault(w.local_queue, {}), request)
        fair.add(w.local_queue, name, request)
    # 2. Per ClusterQueue and resource.
    keys = {cq: sorted(set(book.limits[cq]) | set(used[cq]) | set(pending[cq])) for cq in used}
    borrowed = {cq: {k: max(0, used[cq].get(k, 0) - (nominal[cq].get(k) or 0)) for k in keys[cq]} for cq in used}
    lent = _lent(snapshot, book, used, borrowed)
    queues = []
    for cq in snapshot.cluster_queues:
        dominant, _ = dominant_resource(used[cq.name], fair.cq_pool.get(cq.name, {}), fair.capacity)
        rows = tuple(
            ResourceStanding(
                key=k,
                nominal=nominal[cq.name].get(k, 0),
                used=used[cq.name].get(k, 0),
                borrowed=borrowed[cq.name][k],
                lent=lent.get((cq.name, k), 0),
                pending=pending[cq.name].get(k, 0),
            )
            for k in keys[cq.name]
        )
        queues.append(QueueStanding(cq.name, cq.cohort, cq.weight, fair.cq_share(cq.name), dominant, rows))
    # 3. Cohorts: the sums of their members.
    cohorts = []
    for cohort in sorted({cq.cohort for cq in snapshot.cluster_queues if cq.cohort}):
        totals: dict[str, list[int]] = {}
        for q in queues:
            if q.cohort == cohort:
                for r in q.resources:
                    row = totals.setdefault(r.key, [0, 0, 0, 0, 0])
                    for i, v in enumerate((r.nominal, r.used, r.borrowed, r.lent, r.pending)):
                        row[i] += v
        resources = tuple(ResourceStanding(k, *v) for k, v in sorted(totals.items()))
        cohorts.append(QueueStanding(cohort, cohort, 0.0, 0.0, "", resources))
    # 4. LocalQueues' shares within their ClusterQueue.
    locals_ = tuple(
        LocalStanding(
            name=lq.name,
            team=lq.team,
            cluster_queue=lq.cluster_queue,
            weight=lq.weight,
            share=fair.lq_share(lq.name),
            dominant=dominant_resource(lq_used.get(lq.name, {}), fair.lq_pool.get(lq.name, {}), fair.capacity)[0],
            used=tuple(sorted(lq_used.get(lq.name, {}).items())),
        )
        for lq in snapshot.local_queues
    )
    return Standings(tuple(queues), tuple(cohorts), locals_)


def _demand(
    cluster: Cluster, mig_profiles: dict[str, tuple[str, ...]], book: QuotaBook, cq: str, w: Workload
) -> dict[str, int]:
    """A pending workload's request on the first GPU model of its queue's flavors it may use (every pod
    set of a Ray job's)."""
    for model in models_to_try(w, book.flavors.get(cq, ())):
        shape = shape_of(cluster, mig_profiles, w.resources, model)
        if not isinstance(shape, str):
            sets = podsets.members(w, model, lambda m, on: shape_of(cluster, mig_profiles, m.resources, on))
            return podsets.total_request(request_of(shape, w.replicas), () if isinstance(sets, str) else sets)
    return {}


def _lent(
    snapshot: Snapshot, book: QuotaBook, used: dict[str, dict[str, int]], borrowed: dict[str, dict[str, int]]
) -> dict[tuple[str, str], int]:
    """``(queue, key) -> lent``: each cohort's borrowing split over its members' unused lendable quota."""
    out: dict[tuple[str, str], int] = {}
    for members in book.cohort_members.values():
        keys = {k for q in members for k in book.limits[q]}
        for key in sorted(keys):
            taken = sum(borrowed[q].get(key, 0) for q in members)
            spare = {
                q: min(limit.lendable, max(0, limit.nominal - used[q].get(key, 0)))
                for q in members
                if (limit := book.limits[q].get(key)) is not None
            }
            total = sum(spare.values())
            taken = min(taken, total)
            if taken <= 0:
                continue
            # Largest remainder, so the parts add up to exactly what was borrowed (in whole units).
            exact = {q: taken * s / total for q, s in spare.items()}
            parts = {q: int(v) for q, v in exact.items()}
            rest = taken - sum(parts.values())
            for q in sorted(exact, key=lambda q: (parts[q] - exact[q], q))[: max(0, rest)]:
                parts[q] += 1
            for q, v in parts.items():
                out[(q, key)] = v
    return out


__all__ = ["LocalStanding", "QueueStanding", "ResourceStanding", "Standings", "capacity_totals", "queue_standings"]
