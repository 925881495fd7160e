"""Job schedules: a job request submitted at the instants of a cron expression in a time zone.

A ``ScheduledRun`` row is written for each instant a schedule fired, in the same transaction as the job
it submitted; the unique (schedule, run_at) key is what makes a run happen once, whoever fires it (two
beats, a beat restarted mid-way, a retried task): the second insert of the same instant fails and that
firer submits nothing.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from portal.jobs.models import Job, LocalQueue
from portal.tenants.models import Team


class JobSchedule(models.Model):
    class ConcurrencyPolicy(models.TextChoices):
        ALLOW = "allow", "Start a run even if the previous one has not finished"
        FORBID = "forbid", "Skip a run while the previous one has not finished"

    name = models.CharField(max_length=100)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="job_schedules")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="job_schedules")
    local_queue = models.ForeignKey(LocalQueue, on_delete=models.PROTECT, related_name="job_schedules")
    cron = models.CharField(max_length=120, help_text="minute hour day-of-month month day-of-week")
    timezone = models.CharField(max_length=64, default="UTC", help_text="IANA zone the cron expression is read in.")
    job = models.JSONField(help_text="The job request each run submits: the body of POST /api/v1/jobs/.")
    concurrency_policy = models.CharField(
        max_length=10, choices=ConcurrencyPolicy.choices, default=ConcurrencyPolicy.ALLOW
    )
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField()
    # Instants up to here have been considered; the next firing looks after it.
    fired_through = models.DateTimeField()
    next_run_at = models.DateTimeField(null=True, blank=True, db_index=True)
    missed_runs = models.PositiveIntegerField(default=0, help_text="Instants older than the starting deadline.")

    class Meta:
        ordering = ["team__slug", "name", "id"]
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="uniq_schedule_name")]

    def __str__(self) -> str:
        return f"{self.team.slug}/{self.name} ({self.cron} {self.timezone})"


class ScheduledRun(models.Model):
    class Outcome(models.TextChoices):
        SUBMITTED = "submitted"
        SKIPPED = "skipped"  # the previous run still going under the forbid policy
        REFUSED = "refused"  # the job request was refused (the message says why)

    schedule = models.ForeignKey(JobSchedule, on_delete=models.CASCADE, related_name="runs")
    run_at = models.DateTimeField(help_text="The instant of the cron expression this run is for.")
    fired_at = models.DateTimeField()
    job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    outcome = models.CharField(max_length=10, choices=Outcome.choices)
    message = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["schedule", "-run_at"]
        constraints = [models.UniqueConstraint(fields=["schedule", "run_at"], name="uniq_schedule_run")]

    def __str__(self) -> str:
        return f"{self.schedule_id} at {self.run_at:%Y-%m-%d %H:%M}: {self.outcome}"
