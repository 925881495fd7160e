"""What ran: Running intervals from job histories, running jobs' usage up to now, GPU-hours per day.

Every Running interval is built by ``billing.core.intervals.run_intervals`` over the rows
``run_transitions`` fetches: metering, the cost of running jobs and the dashboard's allocation chart
read the same intervals.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q, QuerySet

from billing.core.intervals import RunInterval, Transition, intervals_in_view, run_intervals
from billing.models import UsageRecord
from billing.records import record_job, record_job_values, usage_record
from portal.jobs.models import Job, JobTransition
from portal.jobs.states import JobState
from portal.tenants.models import Team


def run_transitions(*, jobs: QuerySet[Any] | Iterable[int]) -> list[Transition]:
    """Every transition of the given jobs (a job queryset or ids), ordered by (job, time, id)."""
    rows = (
        JobTransition.objects.filter(job__in=jobs)
        .order_by("job_id", "at", "id")
        .values_list("job_id", "to_state", "at", "detail")
    )
    return [Transition(job_id, at, to_state == JobState.RUNNING, detail or {}) for job_id, to_state, at, detail in rows]


def run_interval_list(*, since: datetime, now: datetime) -> list[RunInterval]:
    """Every Running interval overlapping [since, now], cut to start at ``since``; open ones end at ``now``."""
    # Every transition of a job with any event in the window, not only the events in it: a run that
    # began before ``since`` and was preempted inside the window opened with an older transition.
    recent = JobTransition.objects.filter(at__gte=since).values("job_id")
    jobs = Job.objects.filter(
        Q(pk__in=recent) | Q(state__in=[JobState.RUNNING, JobState.ADMITTED]) | Q(finished_at__gte=since)
    ).values("pk")
    return intervals_in_view(run_intervals(run_transitions(jobs=jobs)), since=since, now=now)


def running_usage(*, now: datetime, team_ids: Iterable[int] | None = None) -> list[UsageRecord]:
    """Unsaved usage records for the open Running intervals of running jobs, up to ``now``: with
    ``job_id`` and the owner's name (``owner_name``), no job instance (``billing.records.RecordJob``)."""
    jobs = Job.objects.filter(state=JobState.RUNNING)
    if team_ids is not None:
        jobs = jobs.filter(team_id__in=list(team_ids))
    by_id = {row.job_id: row for row in map(record_job, jobs.values_list(*record_job_values()))}
    return [
        usage_record(by_id[interval.job_id], interval, end=now)
        for interval in run_intervals(run_transitions(jobs=by_id.keys()))
        if interval.end is None and interval.start < now
    ]


def gpu_hours_by_team_and_day(
    *, teams: QuerySet[Team] | Iterable[Team] | None = None, days: int = 14, now: datetime
) -> dict[str, dict[str, float]]:
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
