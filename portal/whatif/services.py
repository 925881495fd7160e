"""What-if runs: validate a change, run its replay (``whatif_run``) and keep the result (``portal.whatif.start``
records a run and enqueues it).

``whatif_run`` steps:

1. Load the window's history (``scheduling.adapters.history.history_load``) and today's nodes and
   queues (``base_snapshot_load``): the replay runs the window's jobs on today's cluster.
2. Replay with today's settings (the baseline): how closely the replay reproduces the recorded
   admissions is shown beside the result, so a reader knows how far to trust the difference.
3. Replay with the change applied (skipped when nothing changes: the baseline is the result).
4. Figures per team for the recorded history, the baseline and the change (``scheduling.sim.figures``),
   priced with the price book's GPU-hour prices at the window's end.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal
from functools import partial

from django.conf import settings
from django.utils import timezone

from billing.core.prices import PriceLookup, price_segments
from billing.core.units import epoch_hour
from billing.selectors.prices import gpu_model_names, price_list
from portal.jobs.errors import ServiceError
from portal.tenants.models import Membership
from portal.whatif.models import WhatIfRun
from scheduling.adapters.contract import node_capacity_type
from scheduling.adapters.factory import cluster_backend
from scheduling.adapters.history import base_snapshot_load, history_load
from scheduling.engine import model as m
from scheduling.models import NodePool
from scheduling.selectors import policy_from_settings, replay_timing_from_settings
from scheduling.sim.figures import (
    TeamFigures,
    admission_differences,
    cluster_utilization_pct,
    preemption_differences,
    team_figures,
)
from scheduling.sim.history import HistoryRun, replay_history

logger = logging.getLogger(__name__)

MAX_WINDOW = timedelta(days=31)
PLACEMENTS = tuple(value for value, _ in NodePool.Placement.choices if value)
LIMITS = ("nominal_gpus", "borrowing_limit", "lending_limit")


def _number(value: object, field: str, *, whole: bool, optional: bool = False) -> float | int | None:
    if value is None or value == "":
        if optional:
            return None
        raise ServiceError("a number is required", field=field)
    try:
        number = int(value) if whole and not isinstance(value, float) else float(value)  # type: ignore[call-overload, arg-type]
    except (TypeError, ValueError):
        raise ServiceError(f"{value!r} is not a number", field=field) from None
    if whole and number != int(number):
        raise ServiceError("must be a whole number", field=field)
    if number < 0 or number > 1_000_000:
        raise ServiceError("must be between 0 and 1000000", field=field)
    return int(number) if whole else float(number)


def changes_validate(changes: object, *, user, base: m.Snapshot) -> dict:
    """The change in its canonical form, or a ``ServiceError`` naming the field at fault.

    Platform admins may change anything; a team admin only the weights of their own team's local
    queues (403 otherwise)."""
    if not isinstance(changes, dict):
        raise ServiceError("must be an object", field="changes")
    cqs = {cq.name: cq for cq in base.cluster_queues}
    lqs = {lq.name: lq for lq in base.local_queues}
    out: dict = {}
    admin = bool(user.is_staff)
    own_teams = set(
        Membership.objects.filter(user=user, role=Membership.Role.TEAM_ADMIN).values_list("team__slug", flat=True)
    )

    def deny(field: str) -> None:
        if not admin:
            raise ServiceError("only platform admins may change this", field=field, status_code=403)

    unknown = set(changes) - {"placement", "cluster_queues", "local_queues"}
    if unknown:
        raise ServiceError("unknown key", field=f"changes.{sorted(unknown)[0]}")
    if changes.get("placement"):
        deny("placement")
        if changes["placement"] not in PLACEMENTS:
            raise ServiceError(f"must be one of {', '.join(PLACEMENTS)}", field="placement")
        out["placement"] = changes["placement"]
    for name, change in (changes.get("cluster_queues") or {}).items():
        field = f"cluster_queues.{name}"
        if name not in cqs:
            raise ServiceError("no such cluster queue", field=field)
        deny(field)
        if not isinstance(change, dict):
            raise ServiceError("must be an object", field=field)
        cq_out: dict = {}
        if "weight" in change:
            cq_out["weight"] = _number(change["weight"], f"{field}.weight", whole=False)
        models = {f.gpu_model for f in cqs[name].flavors}
        for model, limits in (change.get("flavors") or {}).items():
            flavor_field = f"{field}.flavors.{model}"
            if model not in models:
                raise ServiceError("this cluster queue has no quota of that GPU model", field=flavor_field)
            if not isinstance(limits, dict) or set(limits) - set(LIMITS):
                raise ServiceError(f"must be an object of {', '.join(LIMITS)}", field=flavor_field)
            cq_out.setdefault("flavors", {})[model] = {
                key: _number(limits[key], f"{flavor_field}.{key}", whole=True, optional=key != "nominal_gpus")
                for key in LIMITS
                if key in limits
            }
        out.setdefault("cluster_queues", {})[name] = cq_out
    for name, change in (changes.get("local_queues") or {}).items():
        field = f"local_queues.{name}"
        if name not in lqs:
            raise ServiceError("no such local queue", field=field)
        if not admin and lqs[name].team not in own_teams:
            raise ServiceError("you may change only your own team's weights", field=field, status_code=403)
        if not isinstance(change, dict) or set(change) - {"weight"}:
            raise ServiceError("must be an object with weight", field=field)
        out.setdefault("local_queues", {})[name] = {
            "weight": _number(change.get("weight"), f"{field}.weight", whole=False)
        }
    return out


def changes_apply(base: m.Snapshot, policy: m.Policy, changes: dict) -> tuple[m.Snapshot, m.Policy]:
    """``base`` and ``policy`` with a validated change applied (what it does not name stays)."""
    cq_changes = changes.get("cluster_queues") or {}
    lq_changes = changes.get("local_queues") or {}
    cluster_queues = []
    for cq in base.cluster_queues:
        change = cq_changes.get(cq.name) or {}
        flavors = tuple(replace(f, **(change.get("flavors") or {}).get(f.gpu_model, {})) for f in cq.flavors)
        cluster_queues.append(replace(cq, flavors=flavors, weight=change.get("weight", cq.weight)))
    local_queues = tuple(
        replace(lq, weight=(lq_changes.get(lq.name) or {}).get("weight", lq.weight)) for lq in base.local_queues
    )
    if changes.get("placement"):
        policy = replace(policy, placement=changes["placement"])
    return replace(base, cluster_queues=tuple(cluster_queues), local_queues=local_queues), policy


def _progress(run_id: int, low: float, high: float, fraction: float) -> None:
    WhatIfRun.objects.filter(pk=run_id).update(progress=round(low + (high - low) * fraction, 3))


def _figures_json(figures: list[TeamFigures]) -> dict[str, dict]:
    return {
        f.team: {
            "admitted": f.admitted,
            "waiting": f.waiting,
            "wait_p50_s": f.wait_p50_s,
            "wait_p90_s": f.wait_p90_s,
            "gpu_hours": round(f.gpu_hours, 4),
            "utilization_pct": None if f.utilization_pct is None else round(f.utilization_pct, 2),
            "preemptions": f.preemptions,
            "cost_usd": str(f.cost_usd),
        }
        for f in figures
    }


def whatif_run(*, run_id: int) -> WhatIfRun:
    """Replay the run's window (the module's steps) and store the figures; a failure is recorded."""
    run = WhatIfRun.objects.get(pk=run_id)
    WhatIfRun.objects.filter(pk=run_id).update(status=WhatIfRun.Status.RUNNING, progress=0.0)
    started = time.perf_counter()
    try:
        result = _whatif_result(run)
    except Exception as exc:  # recorded on the run for its page, then raised for the worker's log
        WhatIfRun.objects.filter(pk=run_id).update(
            status=WhatIfRun.Status.FAILED, error=str(exc)[:500], finished_at=timezone.now()
        )
        raise
    result["seconds"] = round(time.perf_counter() - started, 2)
    WhatIfRun.objects.filter(pk=run_id).update(
        status=WhatIfRun.Status.DONE, progress=1.0, result=result, finished_at=timezone.now()
    )
    run.refresh_from_db()
    return run


def _whatif_result(run: WhatIfRun) -> dict:
    # 1. History and today's cluster.
    start_s, end_s = run.window_from.timestamp(), run.window_to.timestamp()
    history = history_load(start=run.window_from, end=run.window_to)
    backend = cluster_backend()
    base = base_snapshot_load(backend=backend)
    policy = policy_from_settings()
    capacity_types = {node.name: node_capacity_type(node) for node in base.nodes}
    replay = partial(
        replay_history,
        jobs=history.jobs,
        start_s=start_s,
        end_s=end_s,
        node_capacity_types=capacity_types,
        **replay_timing_from_settings(),
    )
    changed = bool(run.changes)
    # 2. The baseline: today's settings.
    baseline = replay(base, policy=policy, on_progress=partial(_progress, run.pk, 0.0, 0.5 if changed else 1.0))
    # 3. The change.
    whatif: HistoryRun = baseline
    if changed:
        snapshot, changed_policy = changes_apply(base, policy, run.changes)
        whatif = replay(snapshot, policy=changed_policy, on_progress=partial(_progress, run.pk, 0.5, 1.0))
    # 4. Figures.
    teams = sorted({lq.team for lq in base.local_queues} | {j.workload.team for j in history.jobs})
    lookup = PriceLookup(
        price_segments(price_list(), gpu_model_names(), epoch_hour(run.window_to), epoch_hour(run.window_to) + 1)
    )
    hour = epoch_hour(run.window_to)

    def price(model: str, capacity_type: str) -> Decimal:
        return lookup.at(model, capacity_type, hour)[0]

    def figures(attempts, waiting, snapshot: m.Snapshot) -> dict[str, dict]:
        nominal: dict[str, int] = {}
        cq_nominal = {cq.name: sum(f.nominal_gpus for f in cq.flavors) for cq in snapshot.cluster_queues}
        for lq in snapshot.local_queues:
            nominal[lq.team] = nominal.get(lq.team, 0) + cq_nominal.get(lq.cluster_queue, 0)
        return _figures_json(
            team_figures(
                attempts, waiting, start_s=start_s, end_s=end_s, teams=teams, nominal_gpus=nominal, price=price
            )
        )

    gpus = sum(n.gpu_count for n in base.nodes)
    tolerance_s = settings.SCHEDULER_INTERVAL_S
    differ = admission_differences(history.recorded, baseline.attempts, tolerance_s=tolerance_s)
    preempt_differ = preemption_differences(history.recorded, baseline.attempts)
    whatif_snapshot = changes_apply(base, policy, run.changes)[0] if changed else base
    return {
        "teams": teams,
        "recorded": figures(history.recorded, history.waiting, base),
        "baseline": figures(baseline.attempts, baseline.waiting, base),
        "whatif": figures(whatif.attempts, whatif.waiting, whatif_snapshot),
        "cluster": {
            "gpus": gpus,
            "recorded_pct": cluster_utilization_pct(history.recorded, start_s=start_s, end_s=end_s, gpus=gpus),
            "baseline_pct": cluster_utilization_pct(baseline.attempts, start_s=start_s, end_s=end_s, gpus=gpus),
            "whatif_pct": cluster_utilization_pct(whatif.attempts, start_s=start_s, end_s=end_s, gpus=gpus),
        },
        "check": {
            "jobs": len({a.job_id for a in history.recorded} | {a.job_id for a in baseline.attempts}),
            "differ": len(differ),
            "tolerance_s": tolerance_s,
            "examples": [list(d) for d in differ[:10]],
            "preempt_differ": len(preempt_differ),
            "preempt_examples": [list(d) for d in preempt_differ[:10]],
        },
        "jobs": len(history.jobs),
        "cycles": baseline.cycles + (whatif.cycles if changed else 0),
        "price_hour": hour,
    }
