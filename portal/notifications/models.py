"""Who is told what about their jobs, how, and what was sent.

A user's default choice is a ``NotificationPreference`` without a job; a job's own choice (made by its
owner) overrides it. With neither, a user is told by e-mail when a job fails or is preempted.
Every event of a job that someone is told about becomes one ``Notification`` per channel, unique per
(job, attempt, event, channel): sent once, whatever retries happen on the way.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from portal.jobs.models import Job


class Event(models.TextChoices):
    SUCCEEDED = "job.succeeded", "finished"
    FAILED = "job.failed", "failed"
    PREEMPTED = "job.preempted", "preempted or evicted"
    STARTED_AFTER_WAIT = "job.started_after_wait", "started after a long wait"


class Channel(models.TextChoices):
    EMAIL = "email", "e-mail"
    WEBHOOK = "webhook", "webhook"


class NotificationPreference(models.Model):
    """What a user is told about and how: their default (``job`` empty) or one job's own choice."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    email = models.BooleanField(default=True, help_text="Send e-mail to the user's address.")
    webhook = models.BooleanField(default=False, help_text="POST to the user's webhook.")
    on_succeeded = models.BooleanField(default=False, verbose_name="when it finishes")
    on_failed = models.BooleanField(default=True, verbose_name="when it fails")
    on_preempted = models.BooleanField(default=True, verbose_name="when it is preempted or evicted")
    started_after_wait_min = models.PositiveIntegerField(
        null=True, blank=True, verbose_name="when it starts after waiting more than (minutes)",
        help_text="Empty: never.",
    )  # fmt: skip
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "job"], name="uniq_notification_preference_job"),
            models.UniqueConstraint(
                fields=["user"], condition=models.Q(job__isnull=True), name="uniq_notification_preference_default"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user_id}: {'job ' + str(self.job_id) if self.job_id else 'default'}"

    def wants(self, event: str) -> bool:
        return {
            Event.SUCCEEDED: self.on_succeeded,
            Event.FAILED: self.on_failed,
            Event.PREEMPTED: self.on_preempted,
            Event.STARTED_AFTER_WAIT: self.started_after_wait_min is not None,
        }.get(Event(event), False)

    def channels(self) -> list[str]:
        return [c for c, on in ((Channel.EMAIL, self.email), (Channel.WEBHOOK, self.webhook)) if on]


class WebhookEndpoint(models.Model):
    """A user's webhook: events are POSTed as JSON, signed with HMAC-SHA256 under ``secret``.

    The secret is shown once, when it is made; the portal keeps it to sign with (a hash could not
    sign) and never shows it again."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    url = models.URLField(max_length=500)
    secret = models.CharField(max_length=64)
    secret_prefix = models.CharField(max_length=10, help_text="The secret's first characters, to tell them apart.")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.user_id}: {self.url}"


class Notification(models.Model):
    """One event of a job for its owner on one channel. The unique key makes it happen once."""

    class Status(models.TextChoices):
        PENDING = "pending"
        SENT = "sent"
        FAILED = "failed"

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="+")
    attempt = models.PositiveIntegerField(help_text="The attempt the event belongs to (0: before any).")
    event = models.CharField(max_length=40, choices=Event.choices)
    channel = models.CharField(max_length=10, choices=Channel.choices)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    occurred_at = models.DateTimeField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING, db_index=True)
    tries = models.PositiveIntegerField(default=0)
    last_error = models.CharField(max_length=500, blank=True)
    next_try_at = models.DateTimeField(null=True, blank=True, help_text="After a failed try: when to try again.")
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["status", "next_try_at"])]
        constraints = [
            models.UniqueConstraint(fields=["job", "attempt", "event", "channel"], name="uniq_notification_event")
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} attempt {self.attempt} {self.event} by {self.channel}: {self.status}"
