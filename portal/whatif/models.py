from __future__ import annotations

from django.conf import settings
from django.db import models


class WhatIfRun(models.Model):
    """One replay of a window of job history under a set of changes, and its result.

    ``changes`` (validated by ``services.changes_validate``): ``placement`` (a policy name),
    ``cluster_queues`` ``{name: {"weight": w, "flavors": {model: {"nominal_gpus": n,
    "borrowing_limit": n|None, "lending_limit": n|None}}}}`` and ``local_queues`` ``{"team/name":
    {"weight": w}}``; anything not named keeps today's value. ``result`` holds both columns' figures
    (``services.whatif_run``)."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    window_from = models.DateTimeField()
    window_to = models.DateTimeField()
    changes = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    progress = models.FloatField(default=0.0, help_text="0..1, the part of the window replayed.")
    result = models.JSONField(default=dict, blank=True)
    error = models.CharField(max_length=500, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"what-if {self.pk} ({self.status})"
