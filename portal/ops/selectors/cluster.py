"""The cluster page: every node and every GPU with what holds it, per GPU model totals and FGD's
fragmentation (``scheduling.engine.occupancy``), filtered and scoped to what the user may see."""

from __future__ import annotations

from django.conf import settings

from portal.jobs.models import Job
from portal.tenants.selectors import team_list_for_user
from scheduling.adapters.contract import node_capacity_type
from scheduling.adapters.factory import cluster_backend
from scheduling.adapters.orm import snapshot_view_load
from scheduling.engine.model import Snapshot
from scheduling.engine.occupancy import FOREIGN, FREE, MIG, Device, NodeOccupancy, Occupancy, cluster_occupancy

NODE_STATES = ("free", "partial", "full", "cordoned", "tainted", "spot")
HIDDEN = "another team's job"


def snapshot_now() -> Snapshot:
    """The cluster and every live job, as values (``orm.snapshot_view_load``)."""
    return snapshot_view_load(backend=cluster_backend())


def visible_team_slugs(*, user) -> set[str] | None:
    """The teams whose jobs ``user`` may see by name; ``None`` for platform admins (all)."""
    if user.is_staff:
        return None
    return set(team_list_for_user(user=user).values_list("slug", flat=True))


def _gpus(milli: float) -> float:
    return round(milli / 1000, 3)


def node_state(n: NodeOccupancy) -> str:
    """``cordoned``; else ``free`` (no GPU held), ``full`` (no GPU room left) or ``partial``."""
    if n.node.unschedulable:
        return "cordoned"
    if all(d.state == FREE for d in n.devices):
        return "free"
    if all(d.free_milli == 0 for d in n.devices):
        return "full"
    return "partial"


def _job_rows(ids: set[str]) -> dict[str, dict]:
    numbers = [int(i) for i in ids if i.isdigit()]
    rows = Job.objects.filter(pk__in=numbers).values("id", "name", "team__slug", "owner__username", "state")
    return {str(r["id"]): dict(r) for r in rows}


def _holder_row(holder, jobs: dict[str, dict], visible: set[str] | None) -> dict:
    if not holder.workload:
        return {"job": None, "label": "foreign pod", "team": "", "milli": holder.milli, "mine": False}
    job = jobs.get(holder.workload)
    team = job["team__slug"] if job else ""
    mine = visible is None or team in visible
    label = f"job {holder.workload}" + (f" {job['name']}" if job and job["name"] else "") if mine else HIDDEN
    return {
        "job": int(holder.workload) if mine and holder.workload.isdigit() else None,
        "label": label,
        "team": team if mine else "",
        "milli": holder.milli,
        "mig_profile": holder.mig_profile or "",
        "mig_slot": holder.mig_slot,
        "mine": mine,
    }


def _cell(d: Device, cordoned: bool, jobs: dict[str, dict], visible: set[str] | None) -> dict:
    holders = [_holder_row(h, jobs, visible) for h in d.holders]
    fill = round(100 * min(d.used_milli, d.capacity_milli) / d.capacity_milli) if d.capacity_milli else 0
    if d.state == FREE:
        words = "free"
    elif d.state == MIG:
        slices = ", ".join(f"{h['mig_profile']}@{h['mig_slot']} {h['label']}" for h in holders)
        words = f"MIG {fill}% ({slices})"
    elif d.state == FOREIGN:
        words = f"foreign pod {fill}%"
    else:
        words = f"{fill}% " + ", ".join(f"{h['label']} ({h['milli'] / 1000:g})" for h in holders)
    return {
        "index": d.index,
        "state": d.state,
        "fill_pct": fill,
        "free_milli": d.free_milli,
        "capacity_milli": d.capacity_milli,
        "holders": holders,
        "title": f"GPU {d.index}: {words}" + (" (node cordoned)" if cordoned else ""),
    }


def _node_row(n: NodeOccupancy, jobs: dict[str, dict], visible: set[str] | None) -> dict:
    labels = dict(n.node.labels)
    cordoned = n.node.unschedulable
    mine = [w for w in n.workloads if visible is None or jobs.get(w, {}).get("team__slug") in visible]
    return {
        "name": n.node.name,
        "gpu_model": n.node.gpu_model or "",
        "gpu_count": n.node.gpu_count,
        "pool": n.pool,
        "rack": labels.get(settings.K8S_RACK_LABEL, ""),
        "capacity_type": node_capacity_type(n.node),
        "taints": [f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}" for t in n.node.taints],
        "cordoned": cordoned,
        "mig": n.node.mig_enabled,
        "state": node_state(n),
        "cpu_used_milli": n.cpu_used_milli,
        "cpu_milli": n.node.cpu_milli,
        "jobs": len(n.workloads),
        "my_jobs": len(mine),
        "gpus": [_cell(d, cordoned, jobs, visible) for d in n.devices],
    }


def _matches(row: dict, *, gpu_model: str, pool: str, rack: str, state: str) -> bool:
    if gpu_model and row["gpu_model"] != gpu_model:
        return False
    if pool and row["pool"] != pool:
        return False
    if rack and row["rack"] != rack:
        return False
    if state == "tainted":
        return bool(row["taints"])
    if state == "spot":
        return row["capacity_type"] == "spot"
    return not state or row["state"] == state


def model_rows(occ: Occupancy) -> list[dict]:
    """Per GPU model: GPUs, allocated, free whole, free in fragments, MIG free, cordoned free, and FGD's
    fragmentation (GPUs, and as a share of the free GPU it was measured over). ``overcommit_gpus``: how
    much the allocated and free columns add up to beyond the model's GPUs, which a pool that overcommits
    fractions hands out (a device of a 1.25 pool holds 1.25 GPUs of fractions)."""
    return [
        {
            "overcommit_gpus": _gpus(
                max(
                    0,
                    m.allocated_milli
                    + 1000 * m.free_whole
                    + m.free_fragment_milli
                    + m.mig_free_milli
                    + m.cordoned_free_milli
                    - 1000 * m.gpus,
                )
            ),
            "gpu_model": m.gpu_model,
            "nodes": m.nodes,
            "gpus": m.gpus,
            "allocated_gpus": _gpus(m.allocated_milli),
            "free_whole_gpus": m.free_whole,
            "free_fragment_gpus": _gpus(m.free_fragment_milli),
            "mig_free_gpus": _gpus(m.mig_free_milli),
            "cordoned_free_gpus": _gpus(m.cordoned_free_milli),
            "fragmentation_gpus": _gpus(m.fragmentation_milli) if occ.typical else None,
            "fragmentation_pct": (
                round(100 * m.fragmentation_milli / m.measured_free_milli, 1)
                if occ.typical and m.measured_free_milli
                else None
            ),
        }
        for m in occ.models
    ]


def cluster_view(*, user, gpu_model: str = "", pool: str = "", rack: str = "", state: str = "") -> dict:
    """Everything the cluster page and ``GET /api/v1/cluster/`` show (filters narrow the nodes, not the
    per-model totals)."""
    occ = cluster_occupancy(snapshot_now())
    visible = visible_team_slugs(user=user)
    jobs = _job_rows({w for n in occ.nodes for w in n.workloads})
    rows = [_node_row(n, jobs, visible) for n in occ.nodes]
    shown = [r for r in rows if _matches(r, gpu_model=gpu_model, pool=pool, rack=rack, state=state)]
    return {
        "models": model_rows(occ),
        "typical_pods": len(occ.typical),
        "nodes": shown,
        "node_count": len(rows),
        "filters": {"gpu_model": gpu_model, "pool": pool, "rack": rack, "state": state},
        "choices": {
            "gpu_model": sorted({r["gpu_model"] for r in rows if r["gpu_model"]}),
            "pool": sorted({r["pool"] for r in rows if r["pool"]}),
            "rack": sorted({r["rack"] for r in rows if r["rack"]}),
            "state": list(NODE_STATES),
        },
    }


def node_view(*, user, name: str) -> dict | None:
    """One node, its GPUs and the jobs on it: the user's teams' jobs listed, other teams' counted.
    ``None`` when the cluster has no such node."""
    occ = cluster_occupancy(snapshot_now())
    found = next((n for n in occ.nodes if n.node.name == name), None)
    if found is None:
        return None
    visible = visible_team_slugs(user=user)
    jobs = _job_rows(set(found.workloads))
    row = _node_row(found, jobs, visible)
    listed = [jobs[w] for w in found.workloads if w in jobs and (visible is None or jobs[w]["team__slug"] in visible)]
    row["job_list"] = sorted(listed, key=lambda j: j["id"])
    row["hidden_jobs"] = len(found.workloads) - len(listed)
    row["labels"] = [f"{k}={v}" for k, v in found.node.labels]
    return row
