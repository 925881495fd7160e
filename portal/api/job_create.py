"""The job request as the API and the form take it: strict fields, bounded lists and strings, the
request turned into a ``JobSpec`` (``job_spec_from_body``) and the priority class it names."""

from __future__ import annotations

import copy
import shlex
from types import SimpleNamespace

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from portal.jobs.errors import ServiceError
from portal.jobs.models import GpuModel, Job, LocalQueue, PriorityClass
from portal.jobs.spec import (
    MAX_ALLOWED_GPU_MODELS,
    MAX_COMMAND_ARGS,
    MAX_COMMAND_CHARS,
    MAX_CPU_MILLI,
    MAX_GPU_MEMORY_GIB,
    MAX_GPUS_PER_REPLICA,
    MAX_LABELS,
    MAX_MEMORY_MIB,
    MAX_NODE_SELECTOR,
    MAX_REPLICAS,
    MAX_RESTARTS,
    MAX_RUNTIME_S,
    MAX_TOLERATIONS,
    JobSpec,
    job_spec_validate,
)
from portal.tenants.selectors import team_list_for_user
from scheduling.adapters.k8s.affinity import MAX_SPREAD_CONSTRAINTS
from scheduling.adapters.pod_security import job_request_violations


class StrictSerializer(serializers.Serializer):
    """Refuses unknown fields (400 naming them): a misspelt field must not be a silent no-op."""

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = {k: ["unknown field"] for k in data if k not in self.fields}
            if unknown:
                raise serializers.ValidationError(unknown)
        return super().to_internal_value(data)


class BoundedDictField(serializers.DictField):
    """A string-to-string mapping of at most ``max_items`` entries, keys at most ``max_key_length``."""

    def __init__(self, *, max_items: int, max_key_length: int = 317, **kwargs):
        self.max_items = max_items
        self.max_key_length = max_key_length
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if isinstance(data, dict):
            if len(data) > self.max_items:
                raise serializers.ValidationError(f"at most {self.max_items} entries (got {len(data)})")
            if long := next((k for k in data if len(str(k)) > self.max_key_length), None):
                raise serializers.ValidationError(f"key {str(long)[:40]!r}… is longer than {self.max_key_length}")
        return super().to_internal_value(data)


class TolerationSerializer(StrictSerializer):
    key = serializers.CharField(max_length=317, allow_blank=True, default="")
    operator = serializers.ChoiceField(choices=["Equal", "Exists"], default="Equal")
    value = serializers.CharField(max_length=63, allow_blank=True, default="")
    effect = serializers.ChoiceField(
        choices=["", "NoSchedule", "PreferNoSchedule", "NoExecute"], allow_blank=True, default=""
    )


@extend_schema_field({"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]})
class CommandField(serializers.Field):
    """An argv list, or a shell-like string split with shlex."""

    def to_internal_value(self, data):
        if isinstance(data, str) and len(data) > MAX_COMMAND_CHARS:
            raise serializers.ValidationError(f"longer than {MAX_COMMAND_CHARS} characters")
        if isinstance(data, list) and len(data) > MAX_COMMAND_ARGS:
            raise serializers.ValidationError(f"at most {MAX_COMMAND_ARGS} arguments (got {len(data)})")
        if isinstance(data, str):
            try:
                return shlex.split(data)
            except ValueError as exc:
                raise serializers.ValidationError(f"cannot split command: {exc}") from None
        if isinstance(data, list) and all(isinstance(x, str) for x in data):
            return data
        raise serializers.ValidationError("must be a list of strings or a string")

    def to_representation(self, value):
        return value


@extend_schema_field(
    {
        "type": "object",
        "description": "A pod spec's affinity: nodeAffinity (required terms OR-ed, In/NotIn/Exists/"
        "DoesNotExist/Gt/Lt; preferred terms with weights) and podAntiAffinity between the job's own "
        "replicas (topologyKey; no labelSelector).",
        "example": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "gpu-type", "operator": "In", "values": ["A100", "H100"]}]}
                    ]
                }
            }
        },
    }
)
class AffinityField(serializers.DictField):
    """A pod spec's ``affinity``; the service checks it as Kubernetes would (400 naming the path)."""


@extend_schema_field(
    {
        "type": "object",
        "description": "kind ray: the Ray cluster beyond its head (the job's own gpu, cpu_milli and memory_mib, "
        "one replica): mode (job: a RayJob running entrypoint; cluster: a RayCluster), entrypoint, and "
        "worker_groups, each with name, replicas, gpu, cpu_milli and memory_mib per worker.",
        "example": {
            "mode": "job",
            "entrypoint": "python train.py",
            "worker_groups": [{"name": "gpu", "replicas": 2, "gpu": 4, "cpu_milli": 16000, "memory_mib": 131072}],
        },
    }
)
class RayField(serializers.DictField):
    """A Ray job's spec; the service checks it (400 naming the path, e.g. ray.worker_groups.0.gpu)."""


class FieldsOnce:
    """A serializer whose declared fields are deep-copied once per class, not per instance.

    DRF deep-copies every declared field for each serializer instance (a copy re-instantiates the
    field from its arguments: ~30 fields and their validators, the largest share of a job request's
    validation). Here the deep copy is made once, and each instance binds shallow copies of it: its
    own top-level fields (``bind`` sets their name and parent), sharing what validating does not
    change (validators, a list's or a dict's child field, a nested serializer's child)."""

    _declared_fields: dict[str, serializers.Field]
    _fields_copied: dict[type, dict[str, serializers.Field]] = {}

    def get_fields(self) -> dict[str, serializers.Field]:
        cls = type(self)
        copied = FieldsOnce._fields_copied.get(cls)
        if copied is None:
            copied = FieldsOnce._fields_copied[cls] = copy.deepcopy(self._declared_fields)
        return {name: copy.copy(field) for name, field in copied.items()}


class JobCreateSerializer(FieldsOnce, serializers.Serializer):
    """A job submission. Unknown fields are refused (400 naming them), never silently dropped."""

    name = serializers.CharField(max_length=100, required=False, allow_blank=True, default="")
    team = serializers.SlugField(
        max_length=63, required=False, help_text="Team slug; optional if you belong to one team."
    )
    namespace = serializers.CharField(max_length=63, required=False, help_text="Must be the team's namespace if given.")
    queue = serializers.CharField(max_length=130, help_text="Local queue name in the team (or team/queue).")
    kind = serializers.ChoiceField(
        choices=Job.Kind.choices,
        default=Job.Kind.BATCH,
        help_text="batch (identical pods), training (a distributed training gang), ray (a Ray cluster).",
    )
    image = serializers.CharField(max_length=500)
    command = CommandField(required=False, default=list)
    replicas = serializers.IntegerField(min_value=1, max_value=MAX_REPLICAS, default=1)
    min_available = serializers.IntegerField(min_value=0, max_value=MAX_REPLICAS, default=0)
    gpu = serializers.IntegerField(min_value=0, max_value=MAX_GPUS_PER_REPLICA, default=0)
    gpu_milli = serializers.IntegerField(min_value=0, max_value=999, default=0)
    mig_profile = serializers.CharField(max_length=20, required=False, allow_blank=True, default="")
    gpu_memory_gib = serializers.IntegerField(min_value=0, max_value=MAX_GPU_MEMORY_GIB, default=0)
    cpu_milli = serializers.IntegerField(min_value=1, max_value=MAX_CPU_MILLI, default=1000)
    memory_mib = serializers.IntegerField(min_value=1, max_value=MAX_MEMORY_MIB, default=4096)
    allowed_gpu_models = serializers.ListField(
        child=serializers.CharField(max_length=64), required=False, default=list, max_length=MAX_ALLOWED_GPU_MODELS
    )
    priority_class = serializers.CharField(max_length=64, required=False)
    runtime_s = serializers.IntegerField(min_value=1, max_value=MAX_RUNTIME_S, default=3600)
    restart_policy = serializers.ChoiceField(choices=Job.RestartPolicy.choices, default=Job.RestartPolicy.REQUEUE)
    node_selector = BoundedDictField(
        max_items=MAX_NODE_SELECTOR,
        child=serializers.CharField(max_length=63, allow_blank=True),
        required=False,
        default=dict,
    )
    tolerations = TolerationSerializer(
        many=True,
        required=False,
        default=list,
        max_length=MAX_TOLERATIONS,  # type: ignore[call-arg]  # DRF ≥ 3.14
    )
    affinity = AffinityField(required=False, default=dict)
    topology_spread_constraints = serializers.ListField(
        child=serializers.DictField(),
        required=False,
        default=list,
        max_length=MAX_SPREAD_CONSTRAINTS,
        help_text="A pod spec's topologySpreadConstraints over the job's own replicas (no labelSelector).",
    )
    required_topology = serializers.CharField(
        max_length=316,
        required=False,
        allow_blank=True,
        default="",
        help_text="All replicas of the gang in one node, rack, zone or nvlink domain, or one value of a node label.",
    )
    labels = BoundedDictField(
        max_items=MAX_LABELS,
        child=serializers.CharField(max_length=63, allow_blank=True),
        required=False,
        default=dict,
        help_text="Kubernetes-style labels; cost can be aggregated by them (aggregate=label:<key>).",
    )
    checkpoint_path = serializers.CharField(
        max_length=1024,
        required=False,
        allow_blank=True,
        default="",
        help_text="Where the job writes checkpoints: passed to its pods as CHECKPOINT_PATH, shown when it is "
        "preempted or its spot node is reclaimed.",
    )
    max_restarts = serializers.IntegerField(
        min_value=0,
        max_value=MAX_RESTARTS,
        default=3,
        help_text="Training: how many times the whole gang restarts after a worker fails before the job fails.",
    )
    spot = serializers.BooleanField(
        default=False,
        help_text="May run on spot nodes (at the price book's spot price); requeued if the node is reclaimed.",
    )
    start_after = serializers.DateTimeField(
        required=False, allow_null=True, default=None, help_text="Not admitted before this instant (ISO 8601)."
    )
    start_window = serializers.CharField(
        max_length=11,
        required=False,
        allow_blank=True,
        default="",
        help_text="Admitted only between these local times, e.g. 20:00-08:00 (wraps midnight).",
    )
    window_timezone = serializers.CharField(
        max_length=64, required=False, default="UTC", help_text="IANA zone of start_window, e.g. Europe/Berlin."
    )
    off_peak = serializers.BooleanField(
        default=False,
        help_text="Start only in the off-peak hours (OFFPEAK_HOURS) and be billed at the off-peak price.",
    )
    ray = RayField(required=False, default=dict)

    def to_internal_value(self, data):
        if not isinstance(data, dict):
            raise serializers.ValidationError({"non_field_errors": ["expected a JSON object"]})
        # Pods follow the restricted Pod Security Standard: a field that would weaken it, at any depth,
        # is named in a 400 rather than silently dropped. The namespace is checked against the team later.
        errors = {path: [message] for path, message in job_request_violations(data).items() if path != "namespace"}
        for key in data:
            if key not in self.fields and key not in errors and not any(p.startswith(f"{key}.") for p in errors):
                errors[key] = ["unknown field"]
        if errors:
            raise serializers.ValidationError(errors)
        return super().to_internal_value(data)

    def validate(self, attrs):
        user = self.context["request"].user
        teams = team_list_for_user(user=user)
        team_slug = attrs.get("team")
        queue_name = attrs["queue"]
        if "/" in queue_name:
            prefix, queue_name = queue_name.split("/", 1)
            if team_slug and prefix != team_slug:
                raise serializers.ValidationError(
                    {"queue": [f"{attrs['queue']!r} is a queue of team {prefix!r}, but team is {team_slug!r}"]}
                )
            team_slug = prefix
        if team_slug:
            team = teams.filter(slug=team_slug).first()
            if team is None:
                raise serializers.ValidationError({"team": [f"you are not a member of a team {team_slug!r}"]})
        else:
            own = list(teams[:2])
            if len(own) != 1:
                raise serializers.ValidationError({"team": ["required: you belong to several teams (or none)"]})
            team = own[0]
        if attrs.get("namespace") and attrs["namespace"] != team.namespace:
            raise serializers.ValidationError(
                {"namespace": [f"jobs of team {team.slug!r} run in namespace {team.namespace!r} only"]}
            )
        queue = LocalQueue.objects.filter(team=team, name=queue_name).select_related("team").first()
        if queue is None:
            # The same answer whether another team has a queue of that name or nobody has: the
            # answer must not reveal other teams' queue names.
            raise serializers.ValidationError({"queue": [f"team {team.slug!r} has no queue {queue_name!r}"]})
        names = attrs.get("allowed_gpu_models") or []
        models = list(GpuModel.objects.filter(name__in=names)) if names else []
        unknown = sorted(set(names) - {m.name for m in models})
        if unknown:
            known = ", ".join(GpuModel.objects.values_list("name", flat=True))
            raise serializers.ValidationError(
                {"allowed_gpu_models": [f"unknown GPU model(s) {unknown}; known: {known}"]}
            )
        priority = priority_class_resolve(attrs.get("priority_class"))
        attrs.update(team_obj=team, queue_obj=queue, gpu_models=tuple(models), priority_obj=priority)
        return attrs

    def to_spec(self) -> JobSpec:
        v = self.validated_data
        return JobSpec.from_values(
            v,
            team=v["team_obj"],
            local_queue=v["queue_obj"],
            priority_class=v["priority_obj"],
            allowed_gpu_models=v["gpu_models"],
        )


def _first_field_error(errors) -> tuple[str | None, str]:
    """The dotted field path and message of DRF's first (possibly nested) error."""
    path: list[str] = []
    while True:
        if isinstance(errors, dict) and errors:
            key, errors = next(iter(errors.items()))
            if key != "non_field_errors":
                path.append(str(key))
        elif isinstance(errors, list) and errors:
            nested = next((e for e in errors if e), errors[0])
            if isinstance(nested, (dict, list)):
                errors = nested
                continue
            return (".".join(path) or None), str(nested)
        else:
            return (".".join(path) or None), str(errors)


def job_spec_from_body(user, body) -> JobSpec:
    """A checked job spec from a submit body on behalf of ``user`` (schedules store bodies and submit
    them later): exactly the API's checks, with a refusal as a ``ServiceError`` naming the field."""
    serializer = JobCreateSerializer(data=body, context={"request": SimpleNamespace(user=user)})
    if not serializer.is_valid():
        field, message = _first_field_error(serializer.errors)
        raise ServiceError(message, field=field)
    spec = serializer.to_spec()
    job_spec_validate(spec)
    return spec


def default_priority_class() -> PriorityClass | None:
    """The class named 'default' if there is one, else the lowest-valued class."""
    return PriorityClass.objects.filter(name="default").first() or PriorityClass.objects.order_by("value").first()


def priority_class_resolve(name: str | None) -> PriorityClass:
    """The priority class a request names, else the default one; a 400 naming ``priority_class`` when
    it does not exist or none is configured (jobs and inference services alike)."""
    if name is not None:
        priority = PriorityClass.objects.filter(name=name).first()
        if priority is None:
            raise serializers.ValidationError({"priority_class": [f"unknown priority class {name!r}"]})
        return priority
    priority = default_priority_class()
    if priority is None:
        raise serializers.ValidationError({"priority_class": ["no priority classes are configured"]})
    return priority
