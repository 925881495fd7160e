"""API shapes of what is read: jobs, attempts, placements, transitions and their cost fields; teams,
queues, GPU models, priority classes and quota updates. The job request is in ``job_create``, cost and
dry-run answers in ``answers``; serializers check types and ranges, the business rules live in
``portal.jobs.services``."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from portal.api.job_create import BoundedDictField, StrictSerializer
from portal.jobs.models import GpuModel, Job, JobAttempt, JobTransition, LocalQueue, PriorityClass, ReplicaPlacement
from portal.jobs.spec import (
    SPEC_FIELDS,
)
from portal.tenants.models import Team

BIGINT_MAX = 2**63 - 1


class PlacementSerializer(serializers.ModelSerializer):
    class Meta:
        model = ReplicaPlacement
        fields = [
            "replica",
            "node",
            "gpu_indices",
            "gpu_milli",
            "mig_profile",
            "mig_slot",
            "cpu_milli",
            "memory_mib",
        ]


class TransitionSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobTransition
        fields = ["from_state", "to_state", "at", "reason", "actor"]


def _money(*, allow_null: bool = False) -> serializers.DecimalField:
    """An exact figure (6 decimals), as a string: a float would not round-trip."""
    return serializers.DecimalField(max_digits=20, decimal_places=6, read_only=True, allow_null=allow_null)


class CostFieldsMixin(serializers.Serializer):
    """Run time, GPU-hours, cost so far and estimated total of a job or an attempt.

    The figures come from ``context["costs"]`` (``billing.selectors.job_costs`` over the jobs being
    serialized, computed once per request by the view); ``figures(instance)`` picks the right one."""

    run_s = serializers.SerializerMethodField()
    gpu_hours = serializers.SerializerMethodField()
    cost_usd = serializers.SerializerMethodField()
    estimated_total_usd = serializers.SerializerMethodField()

    def figures(self, instance):
        """A job's figures; a serializer of something else (an attempt) picks its own."""
        return _job_cost(self, instance.pk)

    @extend_schema_field(serializers.FloatField())
    def get_run_s(self, instance) -> float:
        return round(self.figures(instance).run_s, 3)

    @extend_schema_field(_money())
    def get_gpu_hours(self, instance) -> str:
        return str(self.figures(instance).so_far.gpu_hours)

    @extend_schema_field(_money())
    def get_cost_usd(self, instance) -> str:
        return str(self.figures(instance).so_far.total_cost)

    @extend_schema_field(_money(allow_null=True))
    def get_estimated_total_usd(self, instance) -> str | None:
        value = self.figures(instance).estimated_total_usd
        return None if value is None else str(value)


def _job_cost(serializer: serializers.Serializer, job_id: int):
    costs = serializer.context.get("costs") or {}
    if job_id not in costs:
        raise KeyError(f"job {job_id}: the view did not compute its costs (context['costs'])")
    return costs[job_id]


class AttemptSerializer(CostFieldsMixin, serializers.ModelSerializer):
    gpus = serializers.DecimalField(max_digits=12, decimal_places=6, read_only=True)

    class Meta:
        model = JobAttempt
        fields = [
            "number", "queued_at", "admitted_at", "started_at", "ended_at", "outcome", "requeued", "end_reason",
            "gpu_model", "capacity_type", "borrowed", "replicas", "gpus", "nodes", "placements",
            "run_s", "gpu_hours", "cost_usd", "estimated_total_usd",
        ]  # fmt: skip
        read_only_fields = fields

    def figures(self, instance):
        return _job_cost(self, instance.job_id).attempts[instance.number]


class JobSerializer(CostFieldsMixin, serializers.ModelSerializer):
    team = serializers.CharField(source="team.slug")
    namespace = serializers.CharField(source="team.namespace")
    queue = serializers.CharField(source="local_queue.name")
    owner = serializers.CharField(source="owner.username")
    priority_class = serializers.CharField(source="priority_class.name")
    priority = serializers.IntegerField(source="priority_class.value")
    allowed_gpu_models: serializers.SlugRelatedField[GpuModel] = serializers.SlugRelatedField(
        slug_field="name", many=True, read_only=True
    )
    gpu_model = serializers.CharField(source="gpu_model.name", default=None)
    placements = PlacementSerializer(many=True, read_only=True)
    transitions = TransitionSerializer(many=True, read_only=True)
    attempts = AttemptSerializer(many=True, read_only=True)

    class Meta:
        model = Job
        fields = [
            "id", "team", "namespace", "queue", "owner",
            *(name for name in SPEC_FIELDS if name not in ("team", "local_queue")),
            "priority", "state", "message", "created_at",
            "admitted_at", "started_at", "finished_at", "attempt", "gpu_model", "capacity_type",
            "start_failures", "restarts", "not_before", "quota_held_s",
            "pending_reason", "queue_position", "estimated_start", "estimated_start_p90", "placements", "transitions",
            "run_s", "gpu_hours", "cost_usd", "estimated_total_usd", "attempts",
        ]  # fmt: skip
        read_only_fields = fields


class TeamSerializer(serializers.ModelSerializer):
    class Meta:
        model = Team
        fields = ["name", "slug", "namespace"]


class LocalQueueSerializer(serializers.ModelSerializer):
    team = serializers.CharField(source="team.slug")
    cluster_queue = serializers.CharField(source="cluster_queue.name")
    pending_jobs = serializers.IntegerField(read_only=True)
    active_jobs = serializers.IntegerField(read_only=True)

    class Meta:
        model = LocalQueue
        fields = [
            "name",
            "team",
            "cluster_queue",
            "weight",
            "max_pending_jobs",
            "pending_jobs",
            "active_jobs",
        ]


class GpuModelSerializer(serializers.ModelSerializer):
    class Meta:
        model = GpuModel
        fields = ["name", "memory_gib", "mig_profiles"]


class PriorityClassSerializer(serializers.ModelSerializer):
    class Meta:
        model = PriorityClass
        fields = ["name", "value", "preemptible", "min_runtime_s", "description"]


class FlavorQuotaUpdateSerializer(StrictSerializer):
    nominal_gpus = serializers.IntegerField(min_value=0, max_value=1_000_000, required=False)
    borrowing_limit = serializers.IntegerField(min_value=0, max_value=1_000_000, required=False, allow_null=True)
    lending_limit = serializers.IntegerField(min_value=0, max_value=1_000_000, required=False, allow_null=True)


class QuotaUpdateSerializer(StrictSerializer):
    # The columns are PostgreSQL bigints: a larger number is a 400 here, not an overflow in the database.
    cpu_quota_milli = serializers.IntegerField(min_value=0, max_value=BIGINT_MAX, required=False, allow_null=True)
    memory_quota_mib = serializers.IntegerField(min_value=0, max_value=BIGINT_MAX, required=False, allow_null=True)
    flavors = BoundedDictField(max_items=64, max_key_length=64, child=FlavorQuotaUpdateSerializer(), required=False)
