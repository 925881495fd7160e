"""Inference services: a model server that runs until stopped, as replicas the autoscaler adds and removes.

Each replica is a ``Job`` of kind ``inference`` (one pod): it is admitted through the team's queue like
any job (quota, fair share, preemption), metered and billed like one (so a service costs its
replica-hours), and stopped by cancelling it, which releases its quota at once.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from portal.jobs.models import GpuModel, Job, LocalQueue, PriorityClass
from portal.tenants.models import Team


class InferenceService(models.Model):
    class State(models.TextChoices):
        RUNNING = "running"
        STOPPED = "stopped"

    class Metric(models.TextChoices):
        CONCURRENCY = "concurrency", "In-flight requests per replica"
        RPS = "rps", "Requests per second per replica"

    name = models.CharField(max_length=63)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="inference_services")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    local_queue = models.ForeignKey(LocalQueue, on_delete=models.PROTECT, related_name="+")
    priority_class = models.ForeignKey(PriorityClass, on_delete=models.PROTECT, related_name="+")
    image = models.CharField(max_length=500)
    command = models.JSONField(default=list, blank=True)
    model_family = models.CharField(max_length=63, blank=True, help_text="e.g. llama, mistral, qwen")
    model_size_b = models.PositiveIntegerField(null=True, blank=True, help_text="Billions of parameters.")
    gpu_memory_gib = models.PositiveIntegerField(help_text="GPU memory per replica (from the size, or as given).")
    cpu_milli = models.PositiveIntegerField(default=4000)
    memory_mib = models.PositiveIntegerField(default=32768)
    allowed_gpu_models = models.ManyToManyField(GpuModel, blank=True, related_name="+")
    min_replicas = models.PositiveIntegerField(default=1)
    max_replicas = models.PositiveIntegerField(default=1)
    metric = models.CharField(max_length=12, choices=Metric.choices, default=Metric.CONCURRENCY)
    target_per_replica = models.FloatField(help_text="Target value of the metric per replica.")
    preemptible = models.BooleanField(default=False, help_text="Replicas may run on spot (preemptible) capacity.")
    scale_down_stabilization_s = models.PositiveIntegerField(default=300)
    state = models.CharField(max_length=10, choices=State.choices, default=State.RUNNING, db_index=True)
    desired_replicas = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField()
    stopped_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["team__slug", "name", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "name"], condition=models.Q(state="running"), name="uniq_running_service_name"
            ),
            models.CheckConstraint(condition=models.Q(min_replicas__lte=models.F("max_replicas")), name="min_le_max"),
        ]

    def __str__(self) -> str:
        return f"{self.team.slug}/{self.name}"


class ServiceReplica(models.Model):
    """One replica of a service: the job that runs it."""

    service = models.ForeignKey(InferenceService, on_delete=models.CASCADE, related_name="replicas")
    job = models.OneToOneField(Job, on_delete=models.CASCADE, related_name="service_replica")
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["service", "created_at", "id"]

    def __str__(self) -> str:
        return f"{self.service} replica job {self.job_id}"


class ServiceSample(models.Model):
    """One autoscaler pass: the load it read, the replicas running and what it decided (the page's chart)."""

    service = models.ForeignKey(InferenceService, on_delete=models.CASCADE, related_name="samples")
    at = models.DateTimeField(db_index=True)
    load = models.FloatField(help_text="The metric summed over the service (requests/s or in flight).")
    running = models.PositiveIntegerField(help_text="Replicas running.")
    active = models.PositiveIntegerField(help_text="Replicas running or waiting in the queue.")
    recommended = models.PositiveIntegerField(help_text="ceil(load / target), within min and max.")
    desired = models.PositiveIntegerField(help_text="After the stabilization window.")
    source = models.CharField(max_length=20, help_text="prometheus or simulated")

    class Meta:
        ordering = ["service", "at"]

    def __str__(self) -> str:
        return f"{self.service} at {self.at:%H:%M:%S}: load {self.load:g}, {self.desired} desired"
