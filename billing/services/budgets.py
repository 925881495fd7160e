"""Budget writes: alerts at 80 % and 100 % of the month's GPU budget (once each, mailed), and the hold a
hard stop puts on a team."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.utils import timezone

from billing.core.advice import CENTS, thresholds_crossed
from billing.core.windows import month_start
from billing.models import Budget, BudgetAlert
from billing.selectors.budgets import month_gpu_spend, teams_over_budget
from portal.tenants.models import Membership, Team
from portal.tenants.services import team_holds_replace

BUDGET_HOLD = "budget"  # the TeamHold source of the budget hard stop


def budget_alert_recipients(budget: Budget) -> list[str]:
    admins = Membership.objects.filter(team=budget.team, role=Membership.Role.TEAM_ADMIN).select_related("user")
    emails = {m.user.email for m in admins if m.user.email}
    emails |= {e.strip() for e in budget.alert_emails.split(",") if e.strip()}
    return sorted(emails)


def budget_check(*, now: datetime | None = None) -> list[BudgetAlert]:
    """Raise the 80 % and 100 % alerts of the current month for teams that reached them, once each,
    then refresh the hard stops' holds.

    Each alert is created once per (team, month, threshold) — the unique key settles races between
    workers — and mailed to the team admins and the budget's extra addresses.
    """
    now = now or timezone.now()
    budgets = list(Budget.objects.select_related("team"))
    if not budgets:
        return []
    spend = month_gpu_spend(team_ids=[b.team_id for b in budgets], now=now)
    raised = []
    for budget in budgets:
        spent = spend.get(budget.team_id, Decimal(0))
        for threshold in thresholds_crossed(spend_usd=spent, budget_usd=budget.monthly_gpu_usd):
            alert = _budget_alert_raise(budget=budget, threshold=threshold, spent=spent, now=now)
            if alert is not None:
                raised.append(alert)
    budget_holds_refresh(now=now)
    return raised


def _budget_alert_raise(*, budget: Budget, threshold: int, spent: Decimal, now: datetime) -> BudgetAlert | None:
    """The alert of one threshold this month, if this call created (and mailed) it."""
    try:
        with transaction.atomic():
            alert, created = BudgetAlert.objects.get_or_create(
                team=budget.team,
                month=month_start(now).date(),
                threshold_pct=threshold,
                defaults={"spend_usd": spent.quantize(CENTS), "budget_usd": budget.monthly_gpu_usd, "created_at": now},
            )
            if created:
                # Mailed before the alert commits: if the mail fails, no alert is recorded and the
                # next check raises and mails it again, rather than never mailing it.
                budget_alert_send(alert=alert, budget=budget)
    except IntegrityError:  # a concurrent check created it first
        return None
    return alert if created else None


def budget_holds_refresh(*, now: datetime | None = None) -> int:
    """Hold the teams whose budget hard stop is reached (they may not start new jobs); lift the rest.

    The scheduling cycle reads the holds (``portal.tenants.selectors.team_holds``), so it never runs
    a cost query itself. Returns how many teams are held.
    """
    over = dict(teams_over_budget(now=now))
    teams = {team: over[team.slug] for team in Team.objects.filter(slug__in=list(over))}
    team_holds_replace(source=BUDGET_HOLD, holds=teams, now=now)
    return len(teams)


def budget_alert_send(*, alert: BudgetAlert, budget: Budget) -> None:
    recipients = budget_alert_recipients(budget)
    if not recipients:
        return
    stop = (
        " New jobs of the team will not start until the month ends or the budget is raised."
        if budget.hard_stop and alert.threshold_pct >= 100
        else ""
    )
    send_mail(
        subject=f"[GPU portal] {alert.team.name}: {alert.threshold_pct} % of the monthly GPU budget used",
        message=(
            f"Team {alert.team.name} (namespace {alert.team.namespace}) has spent ${alert.spend_usd} on GPUs "
            f"in {alert.month:%B %Y}, {alert.threshold_pct} % or more of its ${alert.budget_usd} budget.{stop}"
        ),
        from_email=None,
        recipient_list=recipients,
        fail_silently=False,
    )
    alert.emailed_to = ", ".join(recipients)[:1000]
    alert.save(update_fields=["emailed_to"])
