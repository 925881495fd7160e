"""Which events of a job someone is told about, once each.

``notify.job_events_notify`` is what the code that applies transitions calls (the cluster sync, the cycle's
preemptions, the sweeper): after its transaction commits, a task runs ``notifications_dispatch`` for
those jobs. Steps of ``notifications_dispatch``:

1. Read the jobs, their latest attempts and their owners' preferences (the job's own, else the
   owner's default, else ``default_preference()``: e-mail on failure and preemption).
2. An attempt that ended Succeeded, Failed or Preempted (or evicted: back to Pending after running)
   is that event; a job that failed before any admission is a failure of attempt 0; an attempt that
   started more than the chosen minutes after its wait began is "started after waiting".
3. Events older than ``NOTIFY_MAX_AGE_S`` are not announced (a backlog after an outage is history).
4. One ``Notification`` row per event and channel, inserted with the unique (job, attempt, event,
   channel) key: a retried task or a second dispatch inserts nothing new.
5. Each pending row is handed to the delivery task after commit; delivery locks the row and sends
   only while it is pending, so a row is sent once.

``notifications_sweep`` (beat) dispatches again for recent events and re-sends pending rows whose
task was lost (a broker outage at the wrong moment) or whose retry is overdue: the unique key and the
row lock keep each one once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime, timedelta
from functools import partial

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from portal.jobs.models import Job, JobAttempt
from portal.jobs.states import JobState
from portal.notifications.deliveries.tasks import notification_deliver_task
from portal.notifications.models import Channel, Event, Notification, NotificationPreference, WebhookEndpoint
from portal.notifications.services.enqueue import task_enqueue

logger = logging.getLogger(__name__)


def default_preference() -> NotificationPreference:
    """What a user who chose nothing is told: e-mail when a job fails or is preempted. A new, unsaved
    instance each time: a form bound to it writes the posted values into it."""
    return NotificationPreference(email=True, on_failed=True, on_preempted=True)


ENDINGS = {JobState.SUCCEEDED: Event.SUCCEEDED, JobState.FAILED: Event.FAILED, JobState.PREEMPTED: Event.PREEMPTED}


def job_events(job: Job, attempt: JobAttempt | None) -> list[tuple[int, Event, datetime, float]]:
    """(attempt number, event, when, wait in seconds) of the job's latest attempt (step 2)."""
    if attempt is None:
        if job.state == JobState.FAILED and job.finished_at is not None:
            return [(0, Event.FAILED, job.finished_at, 0.0)]
        return []
    events = []
    if attempt.started_at is not None:
        wait_s = (attempt.started_at - attempt.queued_at).total_seconds()
        events.append((attempt.number, Event.STARTED_AFTER_WAIT, attempt.started_at, wait_s))
    if attempt.ended_at is not None:
        ended = {
            JobState.SUCCEEDED: Event.SUCCEEDED,
            JobState.FAILED: Event.FAILED,
            JobState.PREEMPTED: Event.PREEMPTED,
        }
        event = ended.get(JobState(attempt.outcome)) if attempt.outcome else None
        if event is None and attempt.outcome == JobState.PENDING and attempt.started_at is not None:
            event = Event.PREEMPTED  # evicted by the cluster while running, and requeued
        if event is not None:
            events.append((attempt.number, event, attempt.ended_at, 0.0))
    return events


def notifications_dispatch(*, job_ids: Iterable[int], now: datetime | None = None) -> int:
    """Steps 1-5 for these jobs; returns how many notifications were new."""
    now = now or timezone.now()
    jobs = list(Job.objects.filter(pk__in=list(job_ids)).select_related("owner"))
    if not jobs:
        return 0
    latest: dict[int, JobAttempt] = {}
    for attempt in JobAttempt.objects.filter(job_id__in=[j.pk for j in jobs]).order_by("job_id", "number"):
        latest[attempt.job_id] = attempt  # the last one wins
    preferences = preference_map(jobs)
    webhooks = set(
        WebhookEndpoint.objects.filter(user_id__in={j.owner_id for j in jobs}).values_list("user_id", flat=True)
    )
    oldest = now - timedelta(seconds=settings.NOTIFY_MAX_AGE_S)
    rows = []
    for job in jobs:
        preference = (
            preferences.get((job.owner_id, job.pk)) or preferences.get((job.owner_id, None)) or default_preference()
        )
        for number, event, at, wait_s in job_events(job, latest.get(job.pk)):
            if at < oldest or not preference.wants(event):
                continue
            if event == Event.STARTED_AFTER_WAIT and wait_s <= (preference.started_after_wait_min or 0) * 60:
                continue
            for channel in preference.channels():
                if (channel == Channel.EMAIL and not job.owner.email) or (
                    channel == Channel.WEBHOOK and job.owner_id not in webhooks
                ):
                    continue
                rows.append(
                    Notification(
                        job=job, attempt=number, event=event, channel=channel, user_id=job.owner_id, occurred_at=at
                    )
                )
    with transaction.atomic():
        before = Notification.objects.filter(job_id__in=[j.pk for j in jobs]).count()
        Notification.objects.bulk_create(rows, ignore_conflicts=True)  # the unique key: once per event
        pending = list(
            Notification.objects.filter(
                job_id__in=[j.pk for j in jobs], status=Notification.Status.PENDING, tries=0
            ).values_list("id", flat=True)
        )
        created = Notification.objects.filter(job_id__in=[j.pk for j in jobs]).count() - before
        for notification_id in pending:
            transaction.on_commit(
                partial(task_enqueue, notification_deliver_task, notification_id=notification_id), robust=True
            )
    return created


def preference_map(jobs: list[Job]) -> dict[tuple[int, int | None], NotificationPreference]:
    """(user id, job id or None for the default) -> preference, for these jobs' owners."""
    rows = NotificationPreference.objects.filter(
        Q(job__isnull=True) | Q(job_id__in=[j.pk for j in jobs]), user_id__in={j.owner_id for j in jobs}
    )
    return {(p.user_id, p.job_id): p for p in rows}


def notifications_sweep(*, now: datetime | None = None) -> int:
    """Dispatch again for the jobs with recent events, and re-send pending notifications older than a
    few minutes (their task was lost). Idempotent."""
    now = now or timezone.now()
    since = now - timedelta(seconds=max(settings.NOTIFY_SWEEP_INTERVAL_S * 3, 300))
    recent = set(
        JobAttempt.objects.filter(Q(ended_at__gte=since) | Q(started_at__gte=since)).values_list("job_id", flat=True)
    ) | set(Job.objects.filter(state=JobState.FAILED, finished_at__gte=since).values_list("id", flat=True))
    created = notifications_dispatch(job_ids=recent, now=now) if recent else 0
    # Never tried for five minutes (the task was lost), or a retry due a while ago that no task made
    # (eager tasks have no worker to wait in; a lost retry): tried again here.
    late = now - timedelta(minutes=2)
    stale = Notification.objects.filter(
        Q(tries=0, created_at__lt=now - timedelta(minutes=5)) | Q(tries__gt=0, next_try_at__lte=late),
        status=Notification.Status.PENDING,
    ).values_list("id", flat=True)[:1000]
    for notification_id in stale:
        task_enqueue(notification_deliver_task, notification_id=notification_id)
    return created
