"""Writes on job schedules: create, enable/disable, delete, and firing the runs that are due.

``schedules_fire`` is what beat calls every ``SCHEDULE_FIRE_INTERVAL_S``:

1. Read the enabled schedules whose next instant is due (``next_run_at <= now``).
2. For each, list the instants in ``(fired_through, now]``; the newest one within the starting deadline
   (``SCHEDULE_STARTING_DEADLINE_S``) is run, older ones are counted as missed (a beat that was down
   for a day starts one run, not a day's worth, as Kubernetes' CronJob does).
3. Insert the run's ``ScheduledRun`` row; the unique (schedule, run_at) key makes a second firer of the
   same instant (another beat, a restarted one, a retried task) fail here and submit nothing; the
   schedule's row lock already makes a concurrent firer wait and then find nothing due.
4. Submit the job in the same transaction (``job_submit``), or record why it was skipped or refused.
5. Move ``fired_through`` to ``now`` and ``next_run_at`` to the next instant.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from portal.jobs.errors import ServiceError
from portal.jobs.models import Job
from portal.jobs.services import JobSpec, job_submit
from portal.jobs.states import FINAL_STATES
from portal.schedules.cron import cron_problem, next_run, run_times, zone_problem
from portal.schedules.models import JobSchedule, ScheduledRun
from portal.tenants.selectors import user_is_team_admin

logger = logging.getLogger(__name__)

SpecOf = Callable[[Any, Mapping[str, Any]], JobSpec]
"""Turns an owner and a submit body into a checked ``JobSpec`` (raises ``ServiceError`` naming the field)."""

MAX_SCHEDULES_PER_TEAM = 100
MAX_LOOKBACK = timedelta(days=7)  # a schedule off for longer counts only the last week's instants as missed


def schedule_validate(*, cron: str, zone: str) -> None:
    if problem := cron_problem(cron):
        raise ServiceError(problem, field="cron")
    if problem := zone_problem(zone):
        raise ServiceError(problem, field="timezone")
    if next_run(cron, zone, after=timezone.now()) is None:
        raise ServiceError(f"{cron!r} never fires", field="cron")


def schedule_create(
    *,
    owner,
    name: str,
    cron: str,
    zone: str,
    job: Mapping[str, Any],
    spec_of: SpecOf,
    concurrency_policy: str = JobSchedule.ConcurrencyPolicy.ALLOW,
    enabled: bool = True,
    now: datetime | None = None,
) -> JobSchedule:
    """A schedule that submits ``job`` (a submit body) at each instant of ``cron`` in ``zone``.

    The body is checked now exactly as a submission is (``spec_of``), so a schedule never holds a job
    request that would be refused; it is checked again at each run (the team's quota, members and
    allow-lists may have changed by then)."""
    schedule_validate(cron=cron, zone=zone)
    try:
        spec = spec_of(owner, job)
    except ServiceError as exc:
        raise ServiceError(exc.message, field=f"job.{exc.field}" if exc.field else "job") from None
    now = now or timezone.now()
    if JobSchedule.objects.filter(team=spec.team).count() >= MAX_SCHEDULES_PER_TEAM:
        raise ServiceError(f"a team has at most {MAX_SCHEDULES_PER_TEAM} schedules", field="name", status_code=409)
    if JobSchedule.objects.filter(team=spec.team, name=name).exists():
        raise ServiceError(f"team {spec.team.slug!r} already has a schedule {name!r}", field="name", status_code=409)
    return JobSchedule.objects.create(
        name=name,
        team=spec.team,
        owner=owner,
        local_queue=spec.local_queue,
        cron=cron.strip(),
        timezone=zone,
        job=dict(job),
        concurrency_policy=concurrency_policy,
        enabled=enabled,
        created_at=now,
        fired_through=now,
        next_run_at=next_run(cron, zone, after=now) if enabled else None,
    )


def _may_change(*, schedule: JobSchedule, by) -> None:
    if schedule.owner_id != by.pk and not user_is_team_admin(user=by, team=schedule.team):
        raise ServiceError("only the schedule's owner or an admin of its team can change it", status_code=403)


def schedule_enable(*, schedule: JobSchedule, by, enabled: bool, now: datetime | None = None) -> JobSchedule:
    """Pause or resume. Resuming fires nothing for the paused time: the next run is the next instant."""
    _may_change(schedule=schedule, by=by)
    now = now or timezone.now()
    with transaction.atomic():
        schedule = JobSchedule.objects.select_for_update().get(pk=schedule.pk)
        if enabled and not schedule.enabled:
            schedule.fired_through = now
        schedule.enabled = enabled
        schedule.next_run_at = next_run(schedule.cron, schedule.timezone, after=now) if enabled else None
        schedule.save(update_fields=["enabled", "fired_through", "next_run_at"])
    return schedule


def schedule_delete(*, schedule: JobSchedule, by) -> None:
    """Delete the schedule and its run history; jobs it submitted stay."""
    _may_change(schedule=schedule, by=by)
    schedule.delete()


def schedules_fire(*, spec_of: SpecOf, now: datetime | None = None) -> list[ScheduledRun]:
    """Fire every due schedule once (the module's steps). Returns the runs this call recorded."""
    now = now or timezone.now()
    due = list(
        JobSchedule.objects.filter(enabled=True, next_run_at__lte=now)
        .order_by("next_run_at", "id")
        .values_list("pk", flat=True)
    )
    runs = []
    for schedule_id in due:
        try:
            run = schedule_fire(schedule_id=schedule_id, spec_of=spec_of, now=now)
        except Exception:  # one broken schedule must not stop the others
            logger.exception("schedule %s could not fire", schedule_id)
            continue
        if run is not None:
            runs.append(run)
    return runs


def schedule_fire(*, schedule_id: int, spec_of: SpecOf, now: datetime) -> ScheduledRun | None:
    """Steps 2-5 for one schedule; None when another firer had already run its instant."""
    with transaction.atomic():
        # The row lock serializes two firers of one schedule (two beats, a retried task): the second
        # reads the cursor the first moved and finds nothing due.
        schedule = (
            JobSchedule.objects.select_for_update(of=("self",)).select_related("team", "owner").get(pk=schedule_id)
        )
        if not schedule.enabled:
            return None
        since = max(schedule.fired_through, now - MAX_LOOKBACK)
        instants = run_times(schedule.cron, schedule.timezone, after=since, until=now)
        deadline = now - timedelta(seconds=settings.SCHEDULE_STARTING_DEADLINE_S)
        run_at = instants[-1] if instants and instants[-1] >= deadline else None
        schedule.missed_runs += len(instants) - (1 if run_at else 0)
        schedule.fired_through = max(now, schedule.fired_through)
        schedule.next_run_at = next_run(schedule.cron, schedule.timezone, after=schedule.fired_through)
        schedule.save(update_fields=["missed_runs", "fired_through", "next_run_at"])
        if run_at is None:
            return None
        try:
            # The unique (schedule, run_at) key: a concurrent insert of this instant waits for the
            # other transaction and then fails here, so the job below is submitted exactly once.
            with transaction.atomic():
                run = ScheduledRun.objects.create(
                    schedule=schedule, run_at=run_at, fired_at=now, outcome=ScheduledRun.Outcome.SUBMITTED
                )
        except IntegrityError:
            return None
        _submit_run(run=run, schedule=schedule, spec_of=spec_of, now=now)
    return run


def _submit_run(*, run: ScheduledRun, schedule: JobSchedule, spec_of: SpecOf, now: datetime) -> None:
    if schedule.concurrency_policy == JobSchedule.ConcurrencyPolicy.FORBID:
        previous = (
            ScheduledRun.objects.filter(schedule=schedule, job__isnull=False, run_at__lt=run.run_at)
            .exclude(job__state__in=FINAL_STATES)
            .values_list("job_id", flat=True)
            .first()
        )
        if previous is not None:
            run.outcome = ScheduledRun.Outcome.SKIPPED
            run.message = f"job {previous} of an earlier run has not finished (concurrency policy: forbid)"
            run.save(update_fields=["outcome", "message"])
            return
    body = dict(schedule.job)
    body.setdefault("name", schedule.name)
    labels = dict(body.get("labels") or {})
    labels.setdefault("schedule", str(schedule.pk))
    body["labels"] = labels
    try:
        with transaction.atomic():
            job: Job = job_submit(owner=schedule.owner, spec=spec_of(schedule.owner, body), at=now)
    except ServiceError as exc:
        run.outcome = ScheduledRun.Outcome.REFUSED
        run.message = (f"{exc.field}: {exc.message}" if exc.field else exc.message)[:500]
        run.save(update_fields=["outcome", "message"])
        return
    run.job = job
    run.message = f"submitted job {job.pk}"
    run.save(update_fields=["job", "message"])
