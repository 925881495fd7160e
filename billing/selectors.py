"""Read-side billing queries."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from decimal import Decimal

from django.db.models import Sum

from billing.models import UsageRecord


def teams_over_budget() -> tuple[tuple[str, str], ...]:
    """(team slug, why) for teams whose budget hard stop forbids new jobs. Budgets arrive with issue 6."""
    return ()


def gpu_hours_by_team(*, teams=None, since: datetime | None = None) -> dict[str, Decimal]:
    records = UsageRecord.objects.all()
    if teams is not None:
        records = records.filter(team__in=teams)
    if since is not None:
        records = records.filter(end__gt=since)
    rows = records.values("team__slug").annotate(gpu_seconds=Sum("gpu_seconds")).order_by("team__slug")
    return {row["team__slug"]: (row["gpu_seconds"] / Decimal(3600)).quantize(Decimal("0.001")) for row in rows}


def gpu_hours_by_team_and_day(*, teams=None, days: int = 14, now: datetime) -> dict[str, dict[str, float]]:
    """GPU-hours per team per UTC day (each record counted on the day its interval starts)."""
    since = now - timedelta(days=days)
    records = UsageRecord.objects.filter(start__gte=since)
    if teams is not None:
        records = records.filter(team__in=teams)
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for slug, start, gpu_seconds in records.values_list("team__slug", "start", "gpu_seconds"):
        day = start.date().isoformat()
        out[slug][day] = out[slug].get(day, 0.0) + float(gpu_seconds) / 3600
    return out
