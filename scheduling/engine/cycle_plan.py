"""Step 4 of a cycle (``cycle``): the plan from its outcomes.

1. The jobs still pending without a fixed start, in the cycle's order (:func:`waiting_jobs`): the ones
   the forecast (``estimate.Forecast``) gives an estimated start.
2. Per pending job: its reason, its position in its LocalQueue (``admission.lq_order_key``) and its
   estimated start, P50 and P90 (a fixed start where the cycle knows it: a preemptor starts now, a
   job outside its start window when the window opens; the P90 never before the P50).
3. Admissions and pending jobs sorted by workload id, with the cycle's figures (``Plan.stats``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from .admission import lq_order_key
from .estimate import Start
from .forecast_queue import Arrivals
from .model import (
    Admission,
    LocalQueue,
    PendingInfo,
    Plan,
    Policy,
    Preemption,
    Reason,
    ReasonKind,
    Workload,
    WorkloadState,
)

if TYPE_CHECKING:
    from .verdict import Feasibility

Pending = Mapping[str, tuple[Reason, float | None]]
"""Workload id -> (reason, fixed estimated start or None)."""


def waiting_jobs(
    considered: Sequence[Workload], pending: Pending, lq_by_name: Mapping[str, LocalQueue]
) -> list[tuple[Workload, str]]:
    """The jobs still pending without a fixed start, in the cycle's order, with their ClusterQueue;
    a blocked team's jobs and invalid requests are left out (they get no estimate)."""
    waiting = []
    for job in considered:
        entry = pending.get(job.id)
        if entry is None or entry[1] is not None or entry[0].kind in (ReasonKind.BUDGET, ReasonKind.INVALID):
            continue
        waiting.append((job, lq_by_name[job.local_queue].cluster_queue))
    return waiting


def plan_of(
    workloads: Sequence[Workload],
    pending: Pending,
    admissions: Sequence[Admission],
    preemptions: Sequence[Preemption],
    forecasts: tuple[Mapping[str, Start], Mapping[str, Start]],
    stats: Mapping[str, int | float],
) -> Plan:
    """The cycle's plan (steps 2 and 3 above) for the snapshot's ``workloads``; ``forecasts`` are the P50
    and P90 estimated starts."""
    p50, p90 = forecasts
    positions = _positions(workloads, pending)
    infos = []
    for w in workloads:
        if w.state != WorkloadState.PENDING or w.id not in pending:
            continue
        reason, fixed = pending[w.id]
        if fixed is not None:
            early: float | None = fixed
            late: float | None = fixed
        else:
            early = p50[w.id].at if w.id in p50 else None
            late = p90[w.id].at if w.id in p90 else None
            if early is not None and late is not None:
                late = max(early, late)
        infos.append(PendingInfo(w.id, reason, positions.get(w.id, 0), early, late))
    infos.sort(key=lambda p: p.workload_id)
    admitted = sorted(admissions, key=lambda a: a.workload_id)
    figures = dict(stats)
    figures.update({"admitted": len(admitted), "preempted": len(preemptions), "still_pending": len(infos)})
    return Plan(tuple(admitted), tuple(preemptions), tuple(infos), tuple(sorted(figures.items())))


def _positions(workloads: Sequence[Workload], pending: Pending) -> dict[str, int]:
    by_lq: dict[str, list[Workload]] = {}
    for w in workloads:
        if w.state == WorkloadState.PENDING and w.id in pending:
            by_lq.setdefault(w.local_queue, []).append(w)
    positions: dict[str, int] = {}
    for jobs in by_lq.values():
        for k, w in enumerate(sorted(jobs, key=lq_order_key), start=1):
            positions[w.id] = k
    return positions


def expected_arrivals(
    recent: Sequence[Workload],
    lq_by_name: Mapping[str, LocalQueue],
    blocked: Collection[str],
    feasibility: Feasibility,
    policy: Policy,
    now: float,
) -> Arrivals:
    """The submissions the forecast expects (``forecast_queue.Arrivals``): the recent ones (submitted within
    ``policy.arrival_period_s``) that are valid and may start (their team not blocked, no start
    window, not a job that never fits), as pending jobs, oldest first."""
    period, horizon = policy.arrival_period_s, policy.arrival_horizon_s
    jobs = []
    for w in sorted(recent, key=lambda w: w.created_at):
        lq = lq_by_name.get(w.local_queue)
        if lq is None or w.team in blocked or w.start_window is not None:
            continue
        if not now - period < w.created_at <= now:
            continue
        job = replace(w, state=WorkloadState.PENDING, gpu_model=None, placements=(), started_at=None)
        if feasibility.never_fits(job) is None:
            jobs.append((job, lq.cluster_queue))
    return Arrivals(tuple(jobs), period, horizon, policy.arrival_upper_p90)
