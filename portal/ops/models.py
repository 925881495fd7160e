"""What platform operations keep: periodic samples of every queue's quota and use, and the audit trail
of admin actions on jobs and prices.

The audit trail is append-only: nothing in the portal changes or deletes an entry (the admin offers
neither), and on PostgreSQL a trigger refuses ``DELETE`` and ``UPDATE`` (``append_only``).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class QueueSample(models.Model):
    """One ClusterQueue's quota, use and pending demand of one GPU model at ``at`` (milli-GPU).

    Written every ``QUEUE_SAMPLE_INTERVAL_S`` by ``portal.ops.tasks.queue_sample``; the Queues page
    draws usage against quota and pending demand over time from them."""

    at = models.DateTimeField()
    cluster_queue = models.CharField(max_length=63)
    gpu_model = models.CharField(max_length=64)
    nominal_milli = models.BigIntegerField(default=0)
    used_milli = models.BigIntegerField(default=0)
    borrowed_milli = models.BigIntegerField(default=0)
    lent_milli = models.BigIntegerField(default=0)
    pending_milli = models.BigIntegerField(default=0)

    class Meta:
        ordering = ["at", "cluster_queue", "gpu_model"]
        indexes = [models.Index(fields=["at"])]
        constraints = [
            models.UniqueConstraint(fields=["at", "cluster_queue", "gpu_model"], name="uniq_queue_sample"),
        ]

    def __str__(self) -> str:
        return (
            f"{self.at:%Y-%m-%d %H:%M %Z} {self.cluster_queue} {self.gpu_model}: {self.used_milli}/{self.nominal_milli}"
        )


class AuditEntry(models.Model):
    """One admin action on a job, a price or a quota: who, when, what, old -> new."""

    class Action(models.TextChoices):
        JOB_CANCEL = "job-cancel", "cancel job"
        JOB_REQUEUE = "job-requeue", "requeue job"
        JOB_PRIORITY = "job-priority", "change job priority"
        JOB_CHANGE = "job-change", "edit job"
        JOB_DELETE = "job-delete", "delete job"
        PRICE_ADD = "price-add", "add price"
        PRICE_CHANGE = "price-change", "change price"
        PRICE_DELETE = "price-delete", "withdraw price"
        QUOTA_CHANGE = "quota-change", "change quota"

    at = models.DateTimeField(db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_name = models.CharField(max_length=150, help_text="Kept when the user is deleted.")
    action = models.CharField(max_length=20, choices=Action.choices)
    target_type = models.CharField(max_length=40, help_text="job, price, cluster queue")
    target_id = models.CharField(max_length=64, blank=True)
    target = models.CharField(max_length=200, help_text="The object in words.")
    field = models.CharField(max_length=100, blank=True)
    old_value = models.CharField(max_length=200, blank=True)
    new_value = models.CharField(max_length=200, blank=True)
    note = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name = "audit entry"
        verbose_name_plural = "audit trail"

    def __str__(self) -> str:
        change = f" {self.field}: {self.old_value or '∅'} → {self.new_value or '∅'}" if self.field else ""
        return f"{self.at:%Y-%m-%d %H:%M:%S %Z} {self.actor_name} {self.get_action_display()} {self.target}{change}"
