"""What a user chose and what they were sent."""

from __future__ import annotations

from django.db.models import QuerySet

from portal.jobs.models import Job
from portal.notifications.models import Notification, NotificationPreference, WebhookEndpoint


def preference_get(*, user, job: Job | None = None) -> NotificationPreference | None:
    """The user's default (``job`` None) or the job's own choice; None when there is none."""
    return NotificationPreference.objects.filter(user=user, job=job).first()


def webhook_get(*, user) -> WebhookEndpoint | None:
    return WebhookEndpoint.objects.filter(user=user).first()


def notification_list(*, user, job: Job | None = None) -> QuerySet[Notification]:
    """The user's notifications, newest first (of one job, if given)."""
    rows = Notification.objects.filter(user=user).select_related("job")
    return rows.filter(job=job) if job is not None else rows
