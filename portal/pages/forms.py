"""The job submission form. It renders fields; validation runs through the API serializer and the
service, so the page and the API enforce exactly the same rules."""

from __future__ import annotations

from typing import Any

import yaml
from django import forms
from django.conf import settings
from django.urls import reverse

from portal.api.parsers import json_problem
from portal.jobs.models import GpuModel, Job, LocalQueue, PriorityClass
from scheduling.engine.mig import parse_mig_profile

MAX_YAML_CHARS = 16 * 1024


class YamlField(forms.CharField):
    """A YAML (or JSON) text parsed into ``kind`` (dict or list), as people paste it from a pod spec.

    ``wrapper``: the key the value sits under in a pod spec; a text holding just that key is
    unwrapped (``affinity: {...}`` and ``{...}`` are the same). Bounded (size, nesting depth, no
    aliases: a YAML alias bomb expands into far more than its text), never executes tags."""

    def __init__(self, *, kind: type, wrapper: str, **kwargs: Any) -> None:
        self.kind = kind
        self.wrapper = wrapper
        kwargs.setdefault("max_length", MAX_YAML_CHARS)
        kwargs.setdefault("widget", forms.Textarea(attrs={"rows": 6, "cols": 60, "spellcheck": "false"}))
        super().__init__(required=False, **kwargs)

    def clean(self, value: Any) -> Any:
        text = super().clean(value)
        if not text.strip():
            return None
        try:
            if any(isinstance(event, yaml.AliasEvent) for event in yaml.parse(text, Loader=yaml.SafeLoader)):
                raise forms.ValidationError("YAML aliases (*name) are not accepted; write the value out")
            parsed = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
            raise forms.ValidationError(f"not valid YAML: {where}{getattr(exc, 'problem', None) or exc}") from None
        if isinstance(parsed, dict) and set(parsed) == {self.wrapper}:
            parsed = parsed[self.wrapper]
        if not isinstance(parsed, self.kind):
            wanted = "a mapping" if self.kind is dict else "a list"
            raise forms.ValidationError(f"expected {wanted} (as under a pod spec's {self.wrapper})")
        if problem := json_problem(parsed, max_depth=settings.API_MAX_JSON_DEPTH):
            raise forms.ValidationError(f"{problem[0]}: {problem[1]}")
        return parsed


class JobForm(forms.Form):
    name = forms.CharField(max_length=100, required=False)
    queue = forms.ChoiceField(help_text="team / local queue")
    kind = forms.ChoiceField(
        choices=Job.Kind.choices,
        initial=Job.Kind.BATCH,
        help_text="training: the replicas are one PyTorch gang (MASTER_ADDR, RANK, WORLD_SIZE ... set for you); "
        "ray: a Ray head and worker groups (below), one gang",
    )
    image = forms.CharField(max_length=500, initial="nvcr.io/nvidia/pytorch:24.08-py3")
    command = forms.CharField(max_length=2000, required=False, initial="python train.py")
    replicas = forms.IntegerField(initial=1)
    min_available = forms.IntegerField(initial=0, help_text="gang size, 0 = all replicas")
    gpu = forms.IntegerField(initial=1, label="Whole GPUs per replica")
    gpu_milli = forms.IntegerField(initial=0, label="GPU fraction (milli-GPU)")
    mig_profile = forms.ChoiceField(
        required=False, label="MIG profile", help_text="from the catalogue, for the GPU models chosen below"
    )
    gpu_memory_gib = forms.IntegerField(initial=0, label="GPU memory (GiB)")
    cpu_milli = forms.IntegerField(initial=4000, label="CPU (milli-cores)")
    memory_mib = forms.IntegerField(initial=16384, label="Memory (MiB)")
    allowed_gpu_models = forms.MultipleChoiceField(
        required=False, widget=forms.CheckboxSelectMultiple, label="Allowed GPU models"
    )
    priority_class = forms.ChoiceField()
    runtime_s = forms.IntegerField(initial=3600, label="Requested runtime (s)")
    affinity = YamlField(
        kind=dict,
        wrapper="affinity",
        label="Affinity (YAML or JSON)",
        help_text="As under a pod's spec.affinity: nodeAffinity (e.g. gpu-type In [A100, H100]) and "
        "podAntiAffinity between this job's replicas (topologyKey only).",
    )
    topology_spread_constraints = YamlField(
        kind=list,
        wrapper="topologySpreadConstraints",
        label="Topology spread (YAML or JSON)",
        help_text="As a pod's topologySpreadConstraints (maxSkew, topologyKey, whenUnsatisfiable), over "
        "this job's replicas.",
    )
    required_topology = forms.ChoiceField(
        required=False,
        label="Keep all replicas in",
        choices=[
            ("", "anywhere (the topology score still keeps them close)"),
            ("node", "one node"),
            ("rack", "one rack"),
            ("zone", "one zone"),
            ("nvlink", "one NVLink domain"),
        ],
    )

    checkpoint_path = forms.CharField(
        max_length=1024,
        required=False,
        label="Checkpoint path",
        help_text="passed to the pods as CHECKPOINT_PATH; resume from it after a preemption or spot reclaim",
    )
    max_restarts = forms.IntegerField(
        initial=3,
        required=False,
        min_value=0,
        label="Gang restarts",
        help_text="training: restarts of the whole gang after a worker fails",
    )
    spot = forms.BooleanField(
        required=False, label="May run on spot nodes", help_text="cheaper; requeued if the node is reclaimed"
    )
    start_after = forms.DateTimeField(
        required=False,
        label="Start after (UTC)",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
        help_text="not admitted before this time",
    )
    start_window = forms.CharField(
        max_length=11,
        required=False,
        label="Only start between",
        widget=forms.TextInput(attrs={"placeholder": "20:00-08:00"}),
        help_text="local times, e.g. 20:00-08:00 (a span may wrap midnight); a running job is not stopped",
    )
    window_timezone = forms.CharField(max_length=64, required=False, initial="UTC", label="Time zone of the window")
    off_peak = forms.BooleanField(
        required=False,
        label="Off-peak",
        help_text="start only in the off-peak hours and pay the price book's off-peak price",
    )

    ray = YamlField(
        kind=dict,
        wrapper="ray",
        label="Ray cluster (YAML or JSON)",
        help_text="kind ray: the fields above are the head's (one replica); here mode (job or cluster), "
        "entrypoint (a RayJob's command) and worker_groups, e.g. "
        "{mode: job, entrypoint: python train.py, worker_groups: [{name: gpu, replicas: 2, gpu: 4}]}",
    )

    def __init__(self, *args, queues: list[LocalQueue], **kwargs):
        super().__init__(*args, **kwargs)
        self.choice_field("queue").choices = queue_choices(queues)
        models = list(GpuModel.objects.all())
        self.choice_field("allowed_gpu_models").choices = [(g.name, g.name) for g in models]
        chosen = self.data.getlist("allowed_gpu_models") if hasattr(self.data, "getlist") else []
        self.choice_field("mig_profile").choices = mig_profile_choices(models, chosen)
        # With htmx, ticking a GPU model reloads the MIG profiles it supports (the server filters).
        self.fields["allowed_gpu_models"].widget.attrs.update(
            {
                "hx-get": reverse("job-mig-profiles"),
                "hx-target": "#id_mig_profile",
                "hx-include": "[name='allowed_gpu_models'],[name='mig_profile']",
                "hx-trigger": "change",
            }
        )
        priorities = list(PriorityClass.objects.order_by("value"))
        self.choice_field("priority_class").choices = [(p.name, f"{p.name} ({p.value})") for p in priorities]
        default = next((p.name for p in priorities if p.name == "default"), priorities[0].name if priorities else None)
        self.fields["priority_class"].initial = default
        self.fields["off_peak"].help_text = (
            f"start only between {settings.OFFPEAK_HOURS.replace('-', ' and ')} {settings.OFFPEAK_TIMEZONE} "
            "and pay the price book's off-peak price"
        )

    def choice_field(self, name: str) -> forms.ChoiceField:
        field = self.fields[name]
        assert isinstance(field, forms.ChoiceField)
        return field


def queue_choices(queues: list[LocalQueue]) -> list[tuple[str, str]]:
    """A form's queue choices: ``team/queue`` (what the request takes) shown as ``team / queue``."""
    return [(f"{q.team.slug}/{q.name}", f"{q.team.slug} / {q.name}") for q in queues]


def mig_profile_choices(models: list[GpuModel], chosen: list[str]) -> list[tuple[str, str]]:
    """MIG profiles of the catalogue's GPU models (only the ``chosen`` ones, when any are), each labelled
    with the models that support it: ``3g.40gb (A100-80GB, H100-80GB)``."""
    selected = [m for m in models if m.name in chosen] or models
    supported: dict[str, list[str]] = {}
    for model in selected:
        for profile in model.mig_profiles or ():
            supported.setdefault(profile, []).append(model.name)
    ordered = sorted(supported, key=lambda p: (parse_mig_profile(p) or (0, 0), p))
    return [("", "none")] + [(p, f"{p} ({', '.join(supported[p])})") for p in ordered]
