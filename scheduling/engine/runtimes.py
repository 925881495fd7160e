"""Expected runtimes from a team's history, and how many submissions to expect: the figures the
forecast (``estimate``) runs on. Pure functions of what the portal knows now.

- ``runtime_from_history``: a job's P50 and P90 runtime from what the team's similar runs ran; for a
  running job, given how long it has run (the conditional lifetime, Downey 1997).
- ``upper_count``: how many submissions to expect, at a quantile, next period after ``n`` in the last
  one (a Poisson rate learned from one period: the Gamma-Poisson predictive).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

SIMILAR_RUNS = 3  # runs needed before history decides


@dataclass(frozen=True, slots=True)
class Runs:
    """A runtime's distribution from runs seen: the values in order and where each sits on the
    cumulative distribution (``points``, 0 for the least, 1 for the greatest), interpolated linearly
    between them (never beyond the values seen). Equal runs: value i at i / (n - 1)."""

    values: tuple[float, ...]
    points: tuple[float, ...]

    @classmethod
    def of(cls, ended: Sequence[float], going: Sequence[float] = ()) -> Runs:
        """From runs that ended (``ended``) and runs still going (``going``: each lasts at least this
        long, censored). With runs going, the Kaplan-Meier estimate: at each end, every run still at
        risk takes an equal share of what is left (ties: ends first); what is left after the last end
        is shared by the runs going beyond it, as if they ended now. Value i then sits at the midpoint
        of its mass, scaled so that the least is at 0 and the greatest at 1 (equal masses: i / (n - 1))."""
        if not going:
            values = tuple(sorted(ended))
            last = max(1, len(values) - 1)
            return cls(values, tuple(i / last for i in range(len(values))))
        marks = sorted([(t, 0) for t in ended] + [(t, 1) for t in going])
        at_risk, left = len(marks), 1.0
        found: list[tuple[float, float]] = []  # (value, mass)
        for t, still in marks:
            if not still:
                found.append((t, left / at_risk))
                left -= left / at_risk
            at_risk -= 1
        tail = [t for t, still in marks if still and (not found or t > found[-1][0])]
        found += [(t, left / len(tail)) for t in tail]
        mids, before = [], 0.0
        for _, mass in found:
            mids.append(before + mass / 2)
            before += mass
        span = (mids[-1] - mids[0]) or 1.0
        return cls(tuple(v for v, _ in found), tuple((m - mids[0]) / span for m in mids))

    def quantiles(self, elapsed: float = 0.0) -> tuple[float, float]:
        """P50 and P90; given ``elapsed`` (a run that has lasted that long), ``F⁻¹(F(e) + q (1 - F(e)))``
        (the conditional lifetime given the age, as Downey predicts a running job's remaining time).
        ``elapsed`` outside the values (at or below the least, or at or beyond the greatest, which
        nothing seen lasted): the plain P50 and P90."""
        values, points = self.values, self.points
        base = 0.0
        if values[0] < elapsed < values[-1]:
            k = bisect.bisect_left(values, elapsed)  # values[k-1] < elapsed <= values[k]
            base = points[k - 1] + (points[k] - points[k - 1]) * (elapsed - values[k - 1]) / (values[k] - values[k - 1])
        return self._at(base + 0.5 * (1.0 - base)), self._at(base + 0.9 * (1.0 - base))

    def _at(self, f: float) -> float:
        values, points = self.values, self.points
        if len(values) == 1:
            return values[0]
        k = min(max(1, bisect.bisect_left(points, f)), len(values) - 1)
        gap = points[k] - points[k - 1]
        share = min(1.0, (f - points[k - 1]) / gap) if gap > 0 else 1.0
        return values[k - 1] + (values[k] - values[k - 1]) * share


def runtime_model(
    requested_s: float,
    history: Sequence[tuple[float, float]],
    speedup: float = 1.0,
    running: Sequence[tuple[float, float]] = (),
) -> Runs | None:
    """The distribution of the runtime, in the cluster's seconds, of a job asking for ``requested_s``
    (its ``runtime_s``), given its team's finished runs ``(requested_s, ran_s)`` (``ran_s`` in the
    cluster's seconds; ``speedup``: how much faster than requested the cluster runs jobs) and its runs
    still going ``(requested_s, ran so far)`` (``running``: they count once ``SIMILAR_RUNS`` runs ended,
    as lasting at least that long, ``Runs.of``: early in a day only the short runs of a long request
    have ended, and they alone would make the figure short).

    With at least ``SIMILAR_RUNS`` runs that asked for the same runtime: what they ran. Else, with that
    many runs at all: the request scaled by what runs took of theirs. Else ``None`` (the request)."""
    asked = requested_s / speedup
    same = [ran for req, ran in history if req == requested_s]
    if len(same) >= SIMILAR_RUNS:
        return Runs.of(same, [ran for req, ran in running if req == requested_s])
    ratios = [ran / (req / speedup) for req, ran in history if req > 0]
    if len(ratios) >= SIMILAR_RUNS:
        going = [asked * ran / (req / speedup) for req, ran in running if req > 0]
        return Runs.of([asked * r for r in ratios], going)
    return None


def runtime_from_history(
    requested_s: float,
    history: Sequence[tuple[float, float]],
    speedup: float = 1.0,
    elapsed_s: float = 0.0,
    running: Sequence[tuple[float, float]] = (),
) -> tuple[float, float]:
    """(P50, P90) expected runtime of a job asking for ``requested_s`` (``runtime_model``; the request
    without history). ``elapsed_s``: how long the job has run already (a running job): the runtime
    given that (``Runs.quantiles``: a job halfway to the runs' median is expected to end later than at
    that median; one that ran longer than any run gets the plain figures, and ``Forecast.end_at`` says
    when an overrunning job is expected to end)."""
    model = runtime_model(requested_s, history, speedup, running)
    if model is None:
        asked = requested_s / speedup
        return asked, asked
    return model.quantiles(elapsed_s)


Z90 = 1.2815515655446004  # the standard normal's 90th percentile


def upper_count(n: int, z: float = Z90) -> float:
    """The submissions to expect next period, at the normal quantile ``z`` (P90 by default), after ``n``
    in the last one, for a Poisson process whose rate is learned from that period alone: with Jeffreys'
    prior the rate is Gamma(n + 1/2, 1 per period), and the next period's count, Gamma-Poisson, has mean
    n + 1/2 and variance 2 (n + 1/2) (the rate's uncertainty plus the count's own); its quantile by the
    normal approximation."""
    mean = n + 0.5
    return mean + z * math.sqrt(2.0 * mean)
