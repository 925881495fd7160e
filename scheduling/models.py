"""Django-side state of the scheduling adapters (the pure engine lives in ``scheduling.engine``)."""

from __future__ import annotations

from django.db import models


class SimNode(models.Model):
    """A node of the simulated cluster (the embedded default backend)."""

    name = models.CharField(max_length=253, unique=True)
    gpu_model = models.ForeignKey(
        "jobs.GpuModel", null=True, blank=True, on_delete=models.PROTECT, related_name="sim_nodes"
    )
    gpu_count = models.PositiveIntegerField(default=0)
    cpu_milli = models.PositiveIntegerField()
    memory_mib = models.PositiveBigIntegerField()
    labels = models.JSONField(default=dict, blank=True)
    taints = models.JSONField(default=list, blank=True, help_text='[{"key":..., "value":..., "effect":...}]')
    unschedulable = models.BooleanField(default=False, help_text="Cordoned.")
    mig_enabled = models.BooleanField(default=False)

    class Meta:
        ordering = ["name"]
        verbose_name = "simulated node"

    def __str__(self) -> str:
        return f"{self.name} ({self.gpu_count}× {self.gpu_model or 'CPU'})"


class CycleRun(models.Model):
    """One scheduling cycle, for the dashboard and for debugging."""

    started_at = models.DateTimeField(db_index=True)
    duration_ms = models.FloatField()
    pending = models.PositiveIntegerField(default=0)
    admitted = models.PositiveIntegerField(default=0)
    preempted = models.PositiveIntegerField(default=0)
    allocated_gpus = models.FloatField(default=0.0, help_text="GPUs held after the cycle (shares summed).")
    total_gpus = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-started_at"]

    def __str__(self) -> str:
        return f"cycle at {self.started_at:%Y-%m-%d %H:%M:%S}: {self.admitted} admitted in {self.duration_ms:.0f} ms"
