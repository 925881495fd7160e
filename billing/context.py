"""Template context for the portal's budget alert banner (``templates/billing/_budget_alerts.html``).

Add ``"billing.context.budget_alerts"`` to the template context processors and include the banner in
``base.html``; both are outside billing's part of the tree, so the portal owner wires them.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.utils import timezone

from billing.models import BudgetAlert
from billing.selectors import budget_alert_list
from portal.tenants.selectors import team_list_for_user


def budget_alerts(request: HttpRequest) -> dict[str, Any]:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"budget_alerts": []}
    alerts = budget_alert_list(teams=team_list_for_user(user=user), now=timezone.now())
    # Only the highest threshold per team: 100 % supersedes 80 %.
    highest: dict[int, BudgetAlert] = {}
    for alert in alerts:
        if alert.team_id not in highest or alert.threshold_pct > highest[alert.team_id].threshold_pct:
            highest[alert.team_id] = alert
    return {"budget_alerts": sorted(highest.values(), key=lambda a: a.team.name)}
