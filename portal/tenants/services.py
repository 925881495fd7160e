"""Writes about teams."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from portal.tenants.models import Team, TeamHold


def team_holds_replace(*, source: str, holds: Mapping[Team, str], now: datetime | None = None) -> None:
    """Make ``holds`` (team -> reason) the whole set of holds from ``source``.

    Holds that continue keep their ``since`` (the reason is refreshed); holds of ``source`` on teams
    not in ``holds`` are lifted. Other sources' holds are untouched.
    """
    now = now or timezone.now()
    with transaction.atomic():
        TeamHold.objects.filter(source=source).exclude(team__in=list(holds)).delete()
        current = {hold.team_id: hold for hold in TeamHold.objects.select_for_update().filter(source=source)}
        for team, reason in holds.items():
            hold = current.get(team.pk)
            if hold is None:
                # The unique (team, source) constraint makes a racing second writer's insert a no-op.
                TeamHold.objects.bulk_create(
                    [TeamHold(team=team, source=source, reason=reason[:500], since=now)], ignore_conflicts=True
                )
            elif hold.reason != reason[:500]:
                hold.reason = reason[:500]
                hold.save(update_fields=["reason"])
