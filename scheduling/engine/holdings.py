"""Step 1 of a cycle (``cycle._Cycle``): what admitted and running workloads hold.

``load_running`` applies their placements and the foreign pods to the cluster's free capacity and
returns them as ``preemption.Holder`` rows with the quota each holds; ``held_per_queue`` sums that
quota per (LocalQueue, ClusterQueue), what the quota book and fair share are charged with.
"""

from __future__ import annotations

from collections.abc import Callable

from .capacity import Cluster
from .fit import Shape
from .model import LocalQueue, Snapshot, Workload, WorkloadState
from .preemption import Holder
from .quota import placements_request, request_of


def load_running(
    snapshot: Snapshot,
    cluster: Cluster,
    lq_by_name: dict[str, LocalQueue],
    shape_for: Callable[[Workload, str | None], Shape | str],
) -> list[Holder]:
    """Every admitted or running workload as a holder, its placements (and the foreign pods) applied."""
    for usage in snapshot.foreign:
        cluster.apply_foreign(usage, refresh=False)
    holders = []
    for w in snapshot.workloads:
        if w.state == WorkloadState.PENDING:
            continue
        lq = lq_by_name.get(w.local_queue)
        cq = lq.cluster_queue if lq is not None else ""
        holders.append(Holder(w, w.local_queue, cq, held(w, cluster, shape_for), w.placements))
    cluster.take_all(p for holder in holders for p in holder.placements)
    cluster.refresh_all()
    return holders


def held(w: Workload, cluster: Cluster, shape_for: Callable[[Workload, str | None], Shape | str]) -> dict[str, int]:
    """Quota a running workload holds, from its placements (or its request if it has none)."""
    if w.placements:
        return placements_request(cluster, w.gpu_model, w.placements)
    shape = shape_for(w, w.gpu_model)
    if isinstance(shape, str):
        return {}
    return request_of(shape, w.replicas)


def held_per_queue(holders: list[Holder]) -> dict[tuple[str, str], dict[str, int]]:
    """The quota the holders hold, summed per (LocalQueue, ClusterQueue)."""
    totals: dict[tuple[str, str], dict[str, int]] = {}
    for holder in holders:
        queue = totals.setdefault((holder.lq, holder.cq), {})
        for key, amount in holder.request.items():
            queue[key] = queue.get(key, 0) + amount
    return totals
