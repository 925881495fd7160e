"""Metered usage. One row per job Running interval, keyed so metering is idempotent."""

from __future__ import annotations

from django.db import models


class UsageRecord(models.Model):
    """GPU, CPU and memory consumed by one job over one closed Running interval.

    ``gpu_seconds`` counts shares: 0.25 GPU for an hour is 900 GPU-seconds; a 3g MIG slice is 3/7 GPU.
    The unique (job, start) key makes re-metering a no-op.
    """

    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="usage_records")
    team = models.ForeignKey("tenants.Team", on_delete=models.CASCADE, related_name="usage_records")
    namespace = models.CharField(max_length=63, db_index=True)
    local_queue = models.CharField(max_length=63)
    cluster_queue = models.CharField(max_length=63)
    gpu_model = models.CharField(max_length=64, blank=True, db_index=True)
    capacity_type = models.CharField(max_length=20, default="on-demand")
    start = models.DateTimeField(db_index=True)
    end = models.DateTimeField()
    gpus = models.DecimalField(max_digits=12, decimal_places=6, help_text="GPUs held (shares summed).")
    gpu_seconds = models.DecimalField(max_digits=24, decimal_places=6)
    cpu_core_seconds = models.DecimalField(max_digits=24, decimal_places=6)
    memory_gib_seconds = models.DecimalField(max_digits=24, decimal_places=6)

    class Meta:
        ordering = ["start", "id"]
        constraints = [models.UniqueConstraint(fields=["job", "start"], name="uniq_usage_interval")]
        indexes = [models.Index(fields=["team", "start"])]

    def __str__(self) -> str:
        return f"job {self.job_id} {self.start:%Y-%m-%d %H:%M}: {self.gpu_seconds} GPU-s"
