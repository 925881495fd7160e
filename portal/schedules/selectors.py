"""Reads on job schedules, scoped to what the user may see."""

from __future__ import annotations

from django.db.models import QuerySet

from portal.schedules.models import JobSchedule, ScheduledRun
from portal.tenants.selectors import team_list_for_user


def schedule_list(*, user) -> QuerySet[JobSchedule]:
    """Schedules of the user's teams (every schedule for platform admins)."""
    schedules = JobSchedule.objects.select_related("team", "owner", "local_queue")
    if user.is_staff:
        return schedules
    return schedules.filter(team_id__in=list(team_list_for_user(user=user).values_list("id", flat=True)))


def schedule_runs(*, schedule: JobSchedule, limit: int = 50) -> list[ScheduledRun]:
    """The schedule's latest runs, newest first."""
    return list(ScheduledRun.objects.filter(schedule=schedule).select_related("job").order_by("-run_at")[:limit])
