"""Budgets: this month's GPU spend per team, the teams a hard stop holds, budget status and alerts."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db.models import QuerySet
from django.utils import timezone

from billing.core.advice import CENTS, budget_hold_reason, budget_reached, budget_used_pct
from billing.core.allocation import AllocationQuery
from billing.core.units import hours_between
from billing.core.windows import month_start, month_to_date
from billing.models import Budget, BudgetAlert
from billing.selectors.allocation import SharedReads, cost_totals
from portal.tenants.models import Team


def month_gpu_spend(
    *, team_ids: Iterable[int] | None = None, now: datetime, shared: SharedReads | None = None
) -> dict[int, Decimal]:
    """GPU cost per team id this calendar month (UTC), including running jobs up to ``now``."""
    start, end = month_to_date(now)
    query = AllocationQuery(
        start=start,
        end=end,
        step_hours=hours_between(start, end),
        aggregate="team",
        show_idle=False,
        team_ids=None if team_ids is None else frozenset(team_ids),
    )
    totals = cost_totals(query, now=now, shared=shared)  # window totals only: no per-step read
    slugs = dict(Team.objects.values_list("slug", "pk"))
    return {slugs[slug]: figures.gpu_cost for slug, figures in totals.items() if slug in slugs}


def teams_over_budget(*, now: datetime | None = None) -> tuple[tuple[str, str], ...]:
    """(team slug, why) for teams whose budget hard stop forbids new jobs: this month's GPU spend has
    reached the monthly budget. Read by the budget check, which holds those teams for the scheduler.
    """
    now = now or timezone.now()
    budgets = list(Budget.objects.filter(hard_stop=True).select_related("team"))
    if not budgets:
        return ()
    spend = month_gpu_spend(team_ids=[b.team_id for b in budgets], now=now)
    blocked = []
    for budget in budgets:
        spent = spend.get(budget.team_id, Decimal(0))
        if budget_reached(spend_usd=spent, budget_usd=budget.monthly_gpu_usd):
            reason = budget_hold_reason(spend_usd=spent, budget_usd=budget.monthly_gpu_usd, now=now)
            blocked.append((budget.team.slug, reason))
    return tuple(sorted(blocked))


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    team: Team
    budget_usd: Decimal
    spend_usd: Decimal
    hard_stop: bool

    @property
    def used_pct(self) -> float:
        return budget_used_pct(spend_usd=self.spend_usd, budget_usd=self.budget_usd)

    @property
    def blocked(self) -> bool:
        return self.hard_stop and budget_reached(spend_usd=self.spend_usd, budget_usd=self.budget_usd)


def budget_status_list(*, teams: QuerySet[Team] | Iterable[Team], now: datetime) -> list[BudgetStatus]:
    budgets = list(Budget.objects.filter(team__in=teams).select_related("team"))
    spend = month_gpu_spend(team_ids=[b.team_id for b in budgets], now=now) if budgets else {}
    return [
        BudgetStatus(b.team, b.monthly_gpu_usd, spend.get(b.team_id, Decimal(0)).quantize(CENTS), b.hard_stop)
        for b in budgets
    ]


def budget_alert_list(*, teams: QuerySet[Team] | Iterable[Team], now: datetime) -> QuerySet[BudgetAlert]:
    """This month's budget alerts of the given teams (for the portal's banner and the cost page)."""
    alerts = BudgetAlert.objects.filter(team__in=teams, month=month_start(now).date())
    return alerts.select_related("team__budget")  # the banner reads the budget's hard stop
