"""Quota warnings: nominal quotas of a GPU model adding up to more than the cluster has, and queues
whose quota is below what they use now."""

from __future__ import annotations

from collections import defaultdict

from scheduling.engine.standing import Standings
from scheduling.selectors import gpu_capacity


def cluster_gpus_by_model() -> dict[str, int]:
    """GPUs the cluster has per model (every node, cordoned ones included)."""
    totals: dict[str, int] = defaultdict(int)
    for (model, _capacity_type), (gpus, _nodes) in gpu_capacity().items():
        totals[model] += gpus
    return dict(totals)


def quota_warnings(standings: Standings, *, cluster_gpus: dict[str, int] | None = None) -> list[str]:
    """Warnings in words, most general first:

    * the nominal quotas of a GPU model, summed over every ClusterQueue, exceed the GPUs of that model
      the cluster has (quota that can never all be honoured at once);
    * a ClusterQueue in no cohort uses more of a GPU model than its nominal quota (it borrows from
      nobody, so its quota was lowered below its current use). In a cohort that is borrowing, shown as
      such on the page, not a warning.
    """
    have = cluster_gpus_by_model() if cluster_gpus is None else cluster_gpus
    nominal: dict[str, int] = defaultdict(int)
    for queue in standings.cluster_queues:
        for r in queue.resources:
            if r.key.startswith("gpu/"):
                nominal[r.key.removeprefix("gpu/")] += r.nominal
    out = []
    for model, milli in sorted(nominal.items()):
        if milli > have.get(model, 0) * 1000:
            out.append(
                f"Nominal quotas of {model} add up to {milli / 1000:g} GPUs, more than the "
                f"{have.get(model, 0)} the cluster has."
            )
    for queue in standings.cluster_queues:
        for r in queue.resources:
            if not r.key.startswith("gpu/") or r.used <= r.nominal:
                continue
            model = r.key.removeprefix("gpu/")
            if not queue.cohort:
                out.append(
                    f"{queue.name} uses {r.used / 1000:g} {model} GPUs, more than its nominal quota of "
                    f"{r.nominal / 1000:g}: nothing new is admitted there until use falls below it."
                )
    return out


def below_use_warnings(standings: Standings, *, cluster_queue: str) -> list[str]:
    """After a quota change: each GPU model whose new nominal quota of ``cluster_queue`` is below what
    the queue uses now (in a cohort the excess counts as borrowed from then on)."""
    out = []
    for queue in standings.cluster_queues:
        if queue.name != cluster_queue:
            continue
        for r in queue.resources:
            if r.key.startswith("gpu/") and r.used > r.nominal:
                where = "borrowed from its cohort" if queue.cohort else "over quota (its jobs keep running)"
                out.append(
                    f"{queue.name}: the nominal quota of {r.key.removeprefix('gpu/')} ({r.nominal / 1000:g} GPUs) "
                    f"is below its current use ({r.used / 1000:g}); the excess is {where}."
                )
    return out
