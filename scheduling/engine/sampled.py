"""Estimated starts as quantiles over sampled forward runs (a Monte Carlo of the forecast).

One forward run (``estimate.Forecast``) at point values tells each job when it starts if every job
runs its P50 and the last period's submissions recur exactly. The start is a nonlinear function of
those inputs (a gang waits for the last of several ends), so that start is not the median start.
Steps (:func:`sampled_starts`):

1. Draw ``samples`` worlds from a generator seeded by the policy's seed and ``now`` (the same cycle
   gives the same estimates). In each:
   a. every waiting job's runtime is drawn from the log-normal with its P50 and P90 expected runtime
      (``lognormal``; equal P50 and P90: exactly that);
   b. every job that holds capacity ends ``now`` plus a remaining time drawn from the log-normal with
      the remaining times of its P50 and P90 expected ends (``Forecast.end_at``); a victim ends now,
      a job that runs until stopped never;
   c. the expected submissions (``Arrivals``) are a Poisson process per local queue: its rate per
      period drawn from Gamma(n + 1/2, 1) after ``n`` submissions in the last period (Jeffreys' prior,
      the rate learned from one period, as ``runtimes.upper_count``), then that many submissions over
      the horizon at uniform times, each a copy of one of the queue's last-period submissions drawn
      at random, with its own runtime drawn as in (a).
2. One forward run per world (``Forecast.run`` with the drawn values as both P50 and P90).
3. Per waiting job, its P50 (P90) estimated start is the median (90th percentile, nearest rank) of its
   starts over the worlds; a world where it did not start within the run's reach counts as never
   (a quantile that falls there: no estimate).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace

import numpy as np

from .estimate import NO_END, P50, P90, Arrivals, Forecast, Host, Runtimes, Start
from .model import Workload
from .preemption import Holder
from .reservations import Reservation
from .runtimes import Z90


def lognormal(rng: np.random.Generator, p50: np.ndarray, p90: np.ndarray) -> np.ndarray:
    """One draw per element from the log-normal whose median is ``p50`` and 90th percentile ``p90``
    (``p90 <= p50``: no spread, ``p50`` itself)."""
    z = rng.standard_normal(len(p50))
    with np.errstate(divide="ignore", invalid="ignore"):
        sigma = np.where((p50 > 0) & (p90 > p50), np.log(np.maximum(p90, 1e-300) / np.maximum(p50, 1e-300)), 0.0)
    return p50 * np.exp(sigma / Z90 * z)


def quantile_rank(count: int, q: float) -> int:
    """The 0-based rank of the ``q`` quantile among ``count`` sorted values (nearest rank: the least
    value with at least a ``q`` share of the values at or below it)."""
    return max(0, math.ceil(q * count - 1e-9) - 1)


def sampled_starts(
    host: Host,
    now: float,
    runtimes: Runtimes,
    running: Runtimes,
    flavors: Mapping[str, tuple[str, ...]],
    waiting: Sequence[tuple[Workload, str]],
    holders: Sequence[Holder],
    victims: Collection[str],
    arrivals: Arrivals | None,
    samples: int,
    seed: int,
    max_decisions: int | None = None,
    reservations: Sequence[Reservation] = (),
) -> tuple[dict[str, Start], dict[str, Start]]:
    """The P50 and P90 estimated starts of ``waiting`` over ``samples`` drawn worlds (steps 1-3)."""
    rng = np.random.default_rng([seed & 0xFFFFFFFF, int(now * 1000) & 0xFFFFFFFFFFFF])
    point = Forecast(host, now, runtimes, flavors, running)
    # Each holder's P50 and P90 remaining time (step 1b), the same in every world.
    remaining = []
    for holder in holders:
        w = holder.workload
        if w.id in victims:
            remaining.append((w, 0.0, 0.0))
        elif w.until_stopped:
            remaining.append((w, NO_END, NO_END))
        else:
            remaining.append((w, point.end_at(w, P50) - now, point.end_at(w, P90) - now))
    found: dict[str, list[float]] = {job.id: [] for job, _ in waiting}
    job_p50 = np.array([runtimes.get(job.id, (job.runtime_s, job.runtime_s))[0] for job, _ in waiting])
    job_p90 = np.array([runtimes.get(job.id, (job.runtime_s, job.runtime_s))[1] for job, _ in waiting])
    timed = [(w, r50, r90) for w, r50, r90 in remaining if r50 != NO_END]
    end_p50 = np.array([r50 for _, r50, _ in timed])
    end_p90 = np.array([r90 for _, _, r90 in timed])
    for _ in range(samples):
        runs = lognormal(rng, job_p50, job_p90)
        drawn = {job.id: (r, r) for (job, _), r in zip(waiting, runs.tolist(), strict=True)}
        lefts = lognormal(rng, end_p50, end_p90)
        ended: dict[str, tuple[float, float]] = {}
        for (w, _, _), left in zip(timed, lefts.tolist(), strict=True):
            started = w.started_at if w.started_at is not None else now
            # ``Forecast.end_at`` takes an end at or before now as overrun: keep it just ahead.
            total = now + max(left, 1e-6) - started
            ended[w.id] = (total, total)
        world = _arrivals(rng, now, arrivals, runtimes, drawn) if arrivals is not None else None
        forecast = Forecast(host, now, drawn, flavors, ended)
        starts = forecast.run(
            waiting,
            holders,
            victims,
            P50,
            max_decisions=max_decisions,
            arrivals=world,
            reservations=reservations,
        )
        for job_id, times in found.items():
            start = starts.get(job_id)
            times.append(start.at if start is not None else math.inf)
    low, high = quantile_rank(samples, 0.5), quantile_rank(samples, 0.9)
    p50s: dict[str, Start] = {}
    p90s: dict[str, Start] = {}
    for job_id, times in found.items():
        times.sort()
        if times[low] < math.inf:
            p50s[job_id] = Start(times[low], None, ())
        if times[high] < math.inf:
            p90s[job_id] = Start(times[high], None, ())
    return p50s, p90s


def _arrivals(
    rng: np.random.Generator,
    now: float,
    arrivals: Arrivals,
    runtimes: Runtimes,
    drawn: dict[str, tuple[float, float]],
) -> Arrivals | None:
    """Step 1c: one world's submissions over the horizon, each once at its own time (an ``Arrivals``
    whose period is the horizon); their drawn runtimes join ``drawn``."""
    period, horizon = arrivals.period, arrivals.horizon
    if period <= 0 or horizon <= 0:
        return None
    by_lq: dict[str, list[tuple[Workload, str]]] = {}
    for job, cq in arrivals.jobs:
        by_lq.setdefault(job.local_queue, []).append((job, cq))
    jobs: list[tuple[float, Workload, str]] = []
    for lq in sorted(by_lq):
        recent = by_lq[lq]
        rate = rng.gamma(len(recent) + 0.5, 1.0)  # submissions per period
        count = int(rng.poisson(rate * horizon / period))
        times = rng.uniform(now, now + horizon, count)
        picks = rng.integers(0, len(recent), count)
        for i in range(count):
            job, cq = recent[int(picks[i])]
            copy_id = f"{job.id}~{lq}~{i}"
            p50, p90 = runtimes.get(job.id, (job.runtime_s, job.runtime_s))
            r = float(lognormal(rng, np.array([p50]), np.array([p90]))[0])
            drawn[copy_id] = (r, r)
            jobs.append((float(times[i]), replace(job, id=copy_id), cq))
    jobs.sort(key=lambda x: (x[0], x[1].id))
    # Dated one horizon back: ``estimate._Expected`` submits each once, one period (the horizon) later.
    dated = tuple((replace(job, created_at=at - horizon), cq) for at, job, cq in jobs)
    return Arrivals(dated, horizon, horizon)
