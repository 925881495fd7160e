"""Efficiency: GPU-hour-weighted utilization per job and per team, with advice."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from billing import sql
from billing.core.advice import recommendation, team_recommendation
from billing.core.units import GPU, GPU_HOUR, epoch_hour
from portal.jobs.models import Job
from portal.tenants.models import Team

FAR_FUTURE = datetime(9000, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class JobEfficiency:
    job_id: int
    job_name: str
    team: str
    gpu_model: str
    gpu_hours: Decimal
    gpu_util_pct: float | None
    fb_used_mib: float | None
    recommendation: str


def _team_ids(teams: Iterable[Team]) -> list[int]:
    return list(Team.objects.filter(pk__in=[t.pk for t in teams]).values_list("pk", flat=True))


def job_efficiency_list(
    *, teams: Iterable[Team], since: datetime, until: datetime | None = None, limit: int = 200
) -> list[JobEfficiency]:
    """Jobs that used GPUs in ``[since, until)`` (until: now), GPU-hour-weighted utilization ascending (least efficient
    first, unmeasured last), with advice. Aggregated in the database: a month holds ~10^6 records."""
    team_ids = _team_ids(teams)
    if not team_ids:
        return []
    until = until or FAR_FUTURE
    # ~10^5 jobs a month: grouped in memory (``large_aggregate``), not sorted on disk.
    rows = sql.fetch_binary(sql.job_efficiency_sql(len(team_ids)), [*team_ids, since, until, limit])
    jobs = Job.objects.in_bulk([row[0] for row in rows])
    slugs = dict(Team.objects.filter(pk__in=team_ids).values_list("pk", "slug"))
    out = []
    for job_id, team_id, model, usage, util, fb in rows:
        job = jobs[job_id]
        out.append(
            JobEfficiency(
                job_id=job_id,
                job_name=job.name,
                team=slugs[team_id],
                gpu_model=model,
                gpu_hours=Decimal(usage / GPU_HOUR).quantize(Decimal("0.001")),
                gpu_util_pct=round(util, 1) if util is not None else None,
                fb_used_mib=round(fb, 1) if fb is not None else None,
                recommendation=recommendation(
                    util_pct=util, gpus_per_replica=job.gpu_share_per_replica, mig_profile=job.mig_profile
                ),
            )
        )
    return out


def job_recommendation_list(
    *, teams: Iterable[Team], since: datetime, until: datetime | None = None, scan: int = 50, limit: int = 25
) -> list[JobEfficiency]:
    """Of the ``scan`` least efficient jobs of the window, the first ``limit`` that have advice (the cost
    page's list)."""
    jobs = job_efficiency_list(teams=teams, since=since, until=until, limit=scan)
    return [j for j in jobs if j.recommendation][:limit]


@dataclass(frozen=True, slots=True)
class TeamEfficiency:
    team: str
    gpu_hours: Decimal
    gpu_util_pct: float | None
    recommendation: str


def team_efficiency_list(
    *, teams: Iterable[Team], since: datetime, until: datetime | None = None
) -> list[TeamEfficiency]:
    """Per team: GPU-hour-weighted utilization over the hours of ``[since, until)`` (until: now; read
    from the hourly rollup, so a month costs a few thousand rows), with advice."""
    team_ids = _team_ids(teams)
    if not team_ids:
        return []
    placeholders = ", ".join(["%s"] * len(team_ids))
    hours = [epoch_hour(since), epoch_hour(until) if until else epoch_hour(FAR_FUTURE)]
    rows = sql.fetch_all(sql.TEAM_EFFICIENCY_SQL.format(placeholders=placeholders), [*hours, *team_ids])
    slugs = dict(Team.objects.filter(pk__in=team_ids).values_list("pk", "slug"))
    out = []
    for team_id, usage, util_usage, measured in rows:
        util = float(util_usage) / int(measured) if measured else None
        out.append(
            TeamEfficiency(
                team=slugs[team_id],
                gpu_hours=GPU.hours(int(usage), 3),
                gpu_util_pct=round(util, 1) if util is not None else None,
                recommendation=team_recommendation(util_pct=util),
            )
        )
    return sorted(out, key=lambda t: t.team)
