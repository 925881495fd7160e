"""Per-team figures of a window of attempts, recorded or replayed (the what-if page's two columns).

Rules (the same for both sides, so a difference is the change's, not the arithmetic's):

- Wait: admission minus the start of that wait, for every attempt admitted in the window; a job still
  waiting when the window ends counts with the wait it has had so far (a lower bound: leaving it out
  would make a change that starves a team look better). P50/P90 by linear interpolation (numpy's
  default), in seconds.
- GPU-hours: billed share (1/7000 GPU units, ``scheduling.engine.shares``) times the part of the
  attempt's run (pods running to its end, or to the window's end) inside the window.
- Utilization: the team's GPU-hours over its nominal quota's GPU-hours (nominal GPUs of the cluster
  queues its local queues feed, times the window's hours); the cluster's: all GPU-hours over all GPUs.
- Preemptions: attempts that ended preempted in the window.
- Cost: GPU-hours times the GPU-hour price of the attempt's model and capacity type (``price``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

import numpy as np

from scheduling.sim.history import PREEMPTED, Attempt

UNITS_PER_GPU = 7000
CENT = Decimal("0.01")


@dataclass(frozen=True, slots=True)
class TeamFigures:
    team: str
    admitted: int  # attempts admitted in the window
    waiting: int  # jobs still waiting at the window's end
    wait_p50_s: float | None
    wait_p90_s: float | None
    gpu_hours: float
    utilization_pct: float | None  # of its nominal quota; None without quota
    preemptions: int
    cost_usd: Decimal


def run_seconds_in(attempt: Attempt, start_s: float, end_s: float) -> float:
    """Seconds of the attempt's run inside ``[start_s, end_s]``."""
    stop = end_s if attempt.ended_s is None else min(attempt.ended_s, end_s)
    return max(0.0, stop - max(attempt.run_from_s, start_s))


def team_figures(
    attempts: Iterable[Attempt],
    waiting: Iterable[tuple[str, str, float]],
    *,
    start_s: float,
    end_s: float,
    teams: Sequence[str],
    nominal_gpus: Mapping[str, int],
    price: Callable[[str, str], Decimal],
) -> list[TeamFigures]:
    """Figures per team of ``teams`` (in that order; teams with nothing in the window get zeros)."""
    hours = (end_s - start_s) / 3600
    waits: dict[str, list[float]] = defaultdict(list)
    admitted: dict[str, int] = defaultdict(int)
    still: dict[str, int] = defaultdict(int)
    unit_seconds: dict[str, float] = defaultdict(float)
    cost: dict[str, Decimal] = defaultdict(Decimal)
    preemptions: dict[str, int] = defaultdict(int)
    for a in attempts:
        if start_s <= a.admitted_s <= end_s:
            admitted[a.team] += 1
            waits[a.team].append(max(0.0, a.admitted_s - a.queued_s))
        seconds = run_seconds_in(a, start_s, end_s)
        unit_seconds[a.team] += a.gpu_share_7000ths * seconds
        if seconds:
            exact_hours = Decimal(a.gpu_share_7000ths) * Decimal(repr(seconds)) / (UNITS_PER_GPU * 3600)
            cost[a.team] += exact_hours * price(a.gpu_model, a.capacity_type or "on-demand")
        if a.outcome == PREEMPTED and a.ended_s is not None and start_s <= a.ended_s <= end_s:
            preemptions[a.team] += 1
    for _job, team, queued_s in waiting:
        still[team] += 1
        waits[team].append(max(0.0, end_s - queued_s))
    out = []
    for team in teams:
        p50 = p90 = None
        if waits[team]:
            p50, p90 = (float(x) for x in np.percentile(waits[team], [50, 90]))
        gpu_hours = unit_seconds[team] / UNITS_PER_GPU / 3600
        nominal = nominal_gpus.get(team, 0)
        out.append(
            TeamFigures(
                team=team,
                admitted=admitted[team],
                waiting=still[team],
                wait_p50_s=p50,
                wait_p90_s=p90,
                gpu_hours=gpu_hours,
                utilization_pct=100 * gpu_hours / (nominal * hours) if nominal and hours > 0 else None,
                preemptions=preemptions[team],
                cost_usd=cost[team].quantize(CENT),
            )
        )
    return out


def cluster_utilization_pct(attempts: Iterable[Attempt], *, start_s: float, end_s: float, gpus: int) -> float | None:
    """All GPU-hours in the window over the cluster's GPU-hours."""
    if gpus <= 0 or end_s <= start_s:
        return None
    unit_seconds = sum(a.gpu_share_7000ths * run_seconds_in(a, start_s, end_s) for a in attempts)
    return 100 * unit_seconds / UNITS_PER_GPU / (gpus * (end_s - start_s))


def _job_id_order(job_id: str) -> tuple[int, str]:
    """Job ids (decimal strings) in numeric order."""
    return len(job_id), job_id


def admission_differences(
    recorded: Sequence[Attempt], replayed: Sequence[Attempt], *, tolerance_s: float
) -> list[tuple[str, float | None, float | None]]:
    """Jobs whose first admission differs by more than ``tolerance_s`` (or happened on one side only):
    ``(job id, recorded admission, replayed admission)``."""

    def first(attempts: Sequence[Attempt]) -> dict[str, float]:
        out: dict[str, float] = {}
        for a in attempts:
            out[a.job_id] = min(out.get(a.job_id, a.admitted_s), a.admitted_s)
        return out

    was, now = first(recorded), first(replayed)
    diffs = []
    for job_id in sorted(set(was) | set(now), key=_job_id_order):
        a, b = was.get(job_id), now.get(job_id)
        if a is None or b is None or abs(a - b) > tolerance_s:
            diffs.append((job_id, a, b))
    return diffs


def preemption_differences(recorded: Sequence[Attempt], replayed: Sequence[Attempt]) -> list[tuple[str, int, int]]:
    """Jobs preempted a different number of times in the two histories: ``(job id, recorded, replayed)``.
    Admissions can agree while one side preempts a job and admits it again within the tolerance."""
    was: dict[str, int] = defaultdict(int)
    now: dict[str, int] = defaultdict(int)
    for attempts, counts in ((recorded, was), (replayed, now)):
        for a in attempts:
            if a.outcome == PREEMPTED:
                counts[a.job_id] += 1
    ids = sorted(set(was) | set(now), key=_job_id_order)
    return [(i, was[i], now[i]) for i in ids if was[i] != now[i]]
