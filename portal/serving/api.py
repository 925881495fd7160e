"""REST API for inference services: ``/api/v1/services/``.

Create one with a model size (``model_size_b``: 7, 13, 70 ...) or explicit ``gpu_memory_gib``, min
and max replicas and a target per replica; each replica is a job of kind ``inference`` in the team's
queue. ``POST /services/<id>/stop/`` stops it; ``GET /services/<id>/samples/`` is the autoscaler's
history (load, replicas running, desired). Cost is its replicas' jobs priced like any job.
"""

from __future__ import annotations

from decimal import Decimal

from django.utils import timezone
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from billing.selectors import job_costs
from portal.api.job_create import CommandField, StrictSerializer, priority_class_resolve
from portal.jobs.models import GpuModel, LocalQueue
from portal.jobs.services import MAX_CPU_MILLI, MAX_GPU_MEMORY_GIB, MAX_MEMORY_MIB
from portal.serving.models import InferenceService, ServiceSample
from portal.serving.selectors import service_list, service_replica_jobs, service_samples
from portal.serving.services import MAX_SERVICE_REPLICAS, ServiceSpec, service_create, service_stop
from portal.serving.sizing import MAX_MODEL_SIZE_B
from portal.tenants.selectors import team_list_for_user
from scheduling.selectors import runtime_speedup


class ServiceSampleSerializer(serializers.ModelSerializer):
    class Meta:
        model = ServiceSample
        fields = ["at", "load", "running", "active", "recommended", "desired", "source"]
        read_only_fields = fields


class ServiceSerializer(serializers.ModelSerializer):
    team = serializers.CharField(source="team.slug")
    queue = serializers.CharField(source="local_queue.name")
    owner = serializers.CharField(source="owner.username")
    priority_class = serializers.CharField(source="priority_class.name")
    allowed_gpu_models: serializers.SlugRelatedField[GpuModel] = serializers.SlugRelatedField(
        slug_field="name", many=True, read_only=True
    )
    replicas = serializers.SerializerMethodField()
    replica_hours = serializers.SerializerMethodField()
    gpu_hours = serializers.SerializerMethodField()
    cost_usd = serializers.SerializerMethodField()

    class Meta:
        model = InferenceService
        fields = [
            "id", "name", "team", "queue", "owner", "priority_class", "image", "command", "model_family",
            "model_size_b", "gpu_memory_gib", "cpu_milli", "memory_mib", "allowed_gpu_models", "min_replicas",
            "max_replicas", "metric", "target_per_replica", "preemptible", "scale_down_stabilization_s",
            "state", "desired_replicas", "created_at", "stopped_at", "replicas", "replica_hours", "gpu_hours",
            "cost_usd",
        ]  # fmt: skip
        read_only_fields = fields

    def _figures(self, service: InferenceService) -> dict:
        cache = self._cache = getattr(self, "_cache", {})
        if service.pk not in cache:
            jobs = service_replica_jobs(service=service)
            costs = job_costs(jobs=jobs, now=timezone.now(), speedup=runtime_speedup())
            cache[service.pk] = {
                "replicas": [
                    {"job": j.pk, "state": j.state, "node_gpu_model": j.gpu_model.name if j.gpu_model else None}
                    for j in jobs
                ],
                "run_s": sum(costs[j.pk].run_s for j in jobs),
                "gpu_hours": sum((costs[j.pk].so_far.gpu_hours for j in jobs), Decimal(0)),
                "cost": sum((costs[j.pk].so_far.total_cost for j in jobs), Decimal(0)),
            }
        return cache[service.pk]

    @extend_schema_field(serializers.ListField(child=serializers.DictField()))
    def get_replicas(self, service) -> list[dict]:
        """Every replica job (running, waiting in the queue, or ended), oldest first."""
        return self._figures(service)["replicas"]

    def get_replica_hours(self, service) -> str:
        return str((Decimal(str(self._figures(service)["run_s"])) / 3600).quantize(Decimal("0.000001")))

    def get_gpu_hours(self, service) -> str:
        return str(self._figures(service)["gpu_hours"])

    def get_cost_usd(self, service) -> str:
        return str(self._figures(service)["cost"])


class ServiceCreateSerializer(StrictSerializer):
    name = serializers.RegexField(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", max_length=63)
    team = serializers.SlugField(max_length=63, required=False)
    queue = serializers.CharField(max_length=63)
    priority_class = serializers.CharField(max_length=64, required=False, help_text="The scheduling class.")
    image = serializers.CharField(max_length=500)
    command = CommandField(required=False, default=list)
    model_family = serializers.CharField(max_length=63, required=False, allow_blank=True, default="")
    model_size_b = serializers.IntegerField(
        min_value=1, max_value=MAX_MODEL_SIZE_B, required=False, allow_null=True, default=None
    )
    gpu_memory_gib = serializers.IntegerField(min_value=0, max_value=MAX_GPU_MEMORY_GIB, default=0)
    cpu_milli = serializers.IntegerField(min_value=1, max_value=MAX_CPU_MILLI, default=4000)
    memory_mib = serializers.IntegerField(min_value=1, max_value=MAX_MEMORY_MIB, default=32768)
    allowed_gpu_models = serializers.ListField(
        child=serializers.CharField(max_length=64), required=False, default=list, max_length=32
    )
    min_replicas = serializers.IntegerField(min_value=0, max_value=MAX_SERVICE_REPLICAS, default=1)
    max_replicas = serializers.IntegerField(min_value=1, max_value=MAX_SERVICE_REPLICAS, default=1)
    metric = serializers.ChoiceField(
        choices=InferenceService.Metric.choices, default=InferenceService.Metric.CONCURRENCY
    )
    target_per_replica = serializers.FloatField(min_value=0.001, max_value=1e9)
    preemptible = serializers.BooleanField(default=False, help_text="Replicas may run on spot capacity.")
    scale_down_stabilization_s = serializers.IntegerField(min_value=0, max_value=86400, default=300)

    def validate(self, attrs):
        user = self.context["request"].user
        teams = team_list_for_user(user=user)
        if attrs.get("team"):
            team = teams.filter(slug=attrs["team"]).first()
            if team is None:
                raise serializers.ValidationError({"team": [f"you are not a member of a team {attrs['team']!r}"]})
        else:
            own = list(teams[:2])
            if len(own) != 1:
                raise serializers.ValidationError({"team": ["required: you belong to several teams (or none)"]})
            team = own[0]
        queue = LocalQueue.objects.filter(team=team, name=attrs["queue"]).select_related("team").first()
        if queue is None:
            raise serializers.ValidationError({"queue": [f"team {team.slug!r} has no queue {attrs['queue']!r}"]})
        names = attrs.get("allowed_gpu_models") or []
        models = list(GpuModel.objects.filter(name__in=names))
        if unknown := sorted(set(names) - {m.name for m in models}):
            raise serializers.ValidationError({"allowed_gpu_models": [f"unknown GPU model(s) {unknown}"]})
        priority = priority_class_resolve(attrs.get("priority_class"))
        attrs.update(queue_obj=queue, models=tuple(models), priority_obj=priority)
        return attrs

    def to_spec(self) -> ServiceSpec:
        v = self.validated_data
        return ServiceSpec(
            name=v["name"],
            local_queue=v["queue_obj"],
            priority_class=v["priority_obj"],
            image=v["image"],
            command=tuple(v["command"]),
            model_family=v["model_family"],
            model_size_b=v["model_size_b"],
            gpu_memory_gib=v["gpu_memory_gib"],
            cpu_milli=v["cpu_milli"],
            memory_mib=v["memory_mib"],
            allowed_gpu_models=v["models"],
            min_replicas=v["min_replicas"],
            max_replicas=v["max_replicas"],
            metric=v["metric"],
            target_per_replica=v["target_per_replica"],
            preemptible=v["preemptible"],
            scale_down_stabilization_s=v["scale_down_stabilization_s"],
        )


class ServiceViewSet(
    mixins.CreateModelMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    """Inference services of your teams (another team's answers 404)."""

    serializer_class = ServiceSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return InferenceService.objects.none()
        return service_list(user=self.request.user)

    @extend_schema(request=ServiceCreateSerializer, responses={201: ServiceSerializer})
    def create(self, request, *args, **kwargs):
        serializer = ServiceCreateSerializer(data=request.data, context={"request": request})
        serializer.is_valid(raise_exception=True)
        service = service_create(owner=request.user, spec=serializer.to_spec())
        return Response(ServiceSerializer(service).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: ServiceSerializer})
    @action(detail=True, methods=["post"])
    def stop(self, request, pk=None):
        """Stop the service: every replica is cancelled and its quota released at once."""
        service = service_stop(service=self.get_object(), by=request.user)
        return Response(ServiceSerializer(service).data)

    @extend_schema(responses={200: ServiceSampleSerializer(many=True)})
    @action(detail=True, methods=["get"])
    def samples(self, request, pk=None):
        """The autoscaler's latest 500 passes, oldest first: load, replicas running and desired."""
        return Response(ServiceSampleSerializer(service_samples(service=self.get_object()), many=True).data)
