"""This month per team: GPU spend so far, the run rate of what runs and is admitted now, a month-end
forecast, and the budget (the cost page's "This month" card).

Forecast = spend so far (``budgets.month_gpu_spend``: the bill's own figure, running jobs up to now)
+ run rate x hours left in the month (UTC), where the run rate is the GPU-hour price of each running
or admitted job's model and capacity type times the GPUs it holds (its current attempt's billed share):
what the month costs if what runs now keeps running and nothing else starts.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from billing.core.advice import CENTS, budget_reached, budget_used_pct
from billing.core.prices import PriceLookup
from billing.core.units import epoch_hour
from billing.core.windows import month_start, next_month
from billing.models import Budget, BudgetAlert
from billing.selectors.allocation import SharedReads
from billing.selectors.budgets import month_gpu_spend
from billing.selectors.prices import price_segment_list
from portal.jobs.models import Job, JobAttempt
from portal.jobs.states import ACTIVE_STATES
from portal.tenants.models import Team

UNITS_PER_GPU = 7000


@dataclass(frozen=True, slots=True)
class TeamMonth:
    team: Team
    spend_usd: Decimal  # so far this month
    rate_usd_per_hour: Decimal  # running and admitted jobs now
    forecast_usd: Decimal  # at the month's end, at that rate
    budget_usd: Decimal | None
    hard_stop: bool
    alert_pct: int | None  # the highest alert threshold crossed this month

    @property
    def used_pct(self) -> float | None:
        return (
            None if self.budget_usd is None else budget_used_pct(spend_usd=self.spend_usd, budget_usd=self.budget_usd)
        )

    @property
    def forecast_pct(self) -> float | None:
        if self.budget_usd is None:
            return None
        return budget_used_pct(spend_usd=self.forecast_usd, budget_usd=self.budget_usd)

    @property
    def blocked(self) -> bool:
        return (
            self.hard_stop
            and self.budget_usd is not None
            and budget_reached(spend_usd=self.spend_usd, budget_usd=self.budget_usd)
        )

    @property
    def bar_pct(self) -> float:
        """The bar's fill, capped at 100 (the text says the real figure)."""
        return min(100.0, self.used_pct or 0.0)

    @property
    def level(self) -> str:
        """``over`` (spend reached the budget), ``warn`` (80 % or a forecast past it) or ``ok``."""
        used, forecast = self.used_pct, self.forecast_pct
        if used is None or forecast is None:
            return "ok"
        if used >= 100:
            return "over"
        return "warn" if used >= 80 or forecast >= 100 else "ok"


def gpu_run_rates(*, team_ids: Iterable[int], now: datetime) -> dict[int, Decimal]:
    """USD per hour of the GPUs held now by running and admitted jobs, per team id."""
    jobs = dict(Job.objects.filter(team_id__in=list(team_ids), state__in=ACTIVE_STATES).values_list("pk", "attempt"))
    if not jobs:
        return {}
    hour = epoch_hour(now)
    lookup = PriceLookup(price_segment_list(hour, hour + 1))
    rates: dict[int, Decimal] = defaultdict(Decimal)
    attempts = JobAttempt.objects.filter(job_id__in=list(jobs), ended_at__isnull=True).values_list(
        "job_id", "number", "job__team_id", "gpu_share_7000ths", "gpu_model", "capacity_type"
    )
    for job_id, number, team_id, share, model, capacity_type in attempts:
        if number != jobs[job_id]:
            continue
        price = lookup.at(model, capacity_type or "on-demand", hour)[0]
        rates[team_id] += Decimal(share) * price / UNITS_PER_GPU
    return rates


def month_forecast_list(*, teams: Iterable[Team], now: datetime, shared: SharedReads | None = None) -> list[TeamMonth]:
    """Every given team's month so far and forecast, with its budget and highest alert."""
    teams = list(teams)
    ids = [t.pk for t in teams]
    spend = month_gpu_spend(team_ids=ids, now=now, shared=shared)
    rates = gpu_run_rates(team_ids=ids, now=now)
    budgets = {b.team_id: b for b in Budget.objects.filter(team_id__in=ids)}
    alerts: dict[int, int] = {}
    for team_id, pct in BudgetAlert.objects.filter(team_id__in=ids, month=month_start(now).date()).values_list(
        "team_id", "threshold_pct"
    ):
        alerts[team_id] = max(pct, alerts.get(team_id, 0))
    hours_left = Decimal(repr(max(0.0, (next_month(now) - now).total_seconds() / 3600)))
    out = []
    for team in sorted(teams, key=lambda t: t.name):
        spent = spend.get(team.pk, Decimal(0))
        rate = rates.get(team.pk, Decimal(0))
        budget = budgets.get(team.pk)
        out.append(
            TeamMonth(
                team=team,
                spend_usd=spent.quantize(CENTS),
                rate_usd_per_hour=rate.quantize(Decimal("0.0001")),
                forecast_usd=(spent + rate * hours_left).quantize(CENTS),
                budget_usd=budget.monthly_gpu_usd if budget else None,
                hard_stop=bool(budget and budget.hard_stop),
                alert_pct=alerts.get(team.pk),
            )
        )
    return out
