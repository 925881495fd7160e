"""Advice from the figures: efficiency recommendations and budget thresholds.

A job or team under ``LOW_UTILIZATION_PCT`` average GPU utilization is told to ask for less (fewer GPUs,
a fraction, a MIG slice, a smaller model); over ``HIGH_UTILIZATION_PCT`` it is GPU-bound and could use
more. Budgets alert at each of ``ALERT_THRESHOLDS_PCT`` of the monthly budget; a hard stop holds the
team once its spend reaches the budget.
"""

from __future__ import annotations

import math
from datetime import datetime
from decimal import Decimal

LOW_UTILIZATION_PCT = 30.0
HIGH_UTILIZATION_PCT = 90.0
ALERT_THRESHOLDS_PCT = (80, 100)
CENTS = Decimal("0.01")


def recommendation(*, util_pct: float | None, gpus_per_replica: float, mig_profile: str = "") -> str:
    """Advice for a job from its average GPU utilization (empty when it is sized about right)."""
    if util_pct is None or gpus_per_replica <= 0:
        return ""
    if util_pct < LOW_UTILIZATION_PCT:
        if gpus_per_replica >= 2:
            fewer = max(1, math.ceil(gpus_per_replica * util_pct / 70))
            return (
                f"{util_pct:.0f} % average GPU utilization: request {fewer} GPU(s) instead of "
                f"{gpus_per_replica:g}, or a smaller GPU model"
            )
        if gpus_per_replica >= 1:
            return (
                f"{util_pct:.0f} % average GPU utilization: a fraction (gpu_milli 500 or less), "
                "a MIG slice such as 3g.40gb, or a smaller GPU model would do"
            )
        if mig_profile.startswith("1g."):  # one compute slice: no MIG profile is smaller
            return (
                f"{util_pct:.0f} % average GPU utilization on MIG {mig_profile}, already the smallest slice: "
                "a smaller GPU model, or several such jobs' work in one, would do"
            )
        what = f"MIG {mig_profile}" if mig_profile else f"{gpus_per_replica:g} GPU"
        return f"{util_pct:.0f} % average GPU utilization: a smaller share than {what} would do"
    if util_pct > HIGH_UTILIZATION_PCT:
        return (
            f"{util_pct:.0f} % average GPU utilization: the job is GPU-bound; more GPUs, a larger share "
            "or a faster GPU model would shorten it"
        )
    return ""


def team_recommendation(*, util_pct: float | None) -> str:
    if util_pct is None:
        return ""
    if util_pct < LOW_UTILIZATION_PCT:
        return (
            f"{util_pct:.0f} % average GPU utilization across the team: the jobs listed below could use "
            "fewer or smaller GPUs, fractions or MIG slices"
        )
    if util_pct > HIGH_UTILIZATION_PCT:
        return f"{util_pct:.0f} % average GPU utilization: the team's jobs are GPU-bound and could use more"
    return ""


def thresholds_crossed(*, spend_usd: Decimal, budget_usd: Decimal) -> list[int]:
    """Alert thresholds (percent of the budget) that ``spend_usd`` has reached."""
    if budget_usd <= 0:
        return list(ALERT_THRESHOLDS_PCT) if spend_usd > 0 else []
    return [pct for pct in ALERT_THRESHOLDS_PCT if spend_usd * 100 >= budget_usd * pct]


def budget_reached(*, spend_usd: Decimal, budget_usd: Decimal) -> bool:
    """Whether a month's spend has reached its budget (what a hard stop acts on)."""
    return spend_usd >= budget_usd


def budget_used_pct(*, spend_usd: Decimal, budget_usd: Decimal) -> float:
    return float(spend_usd / budget_usd * 100) if budget_usd else 0.0


def budget_hold_reason(*, spend_usd: Decimal, budget_usd: Decimal, now: datetime) -> str:
    """Why a hard stop holds a team (shown as the pending reason of its new jobs)."""
    return f"monthly GPU budget reached: ${spend_usd.quantize(CENTS)} of ${budget_usd} spent in {now:%B %Y}"
