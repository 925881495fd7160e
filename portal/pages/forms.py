"""The job submission form. It renders fields; validation runs through the API serializer and the
service, so the page and the API enforce exactly the same rules."""

from __future__ import annotations

from django import forms
from django.urls import reverse

from portal.jobs.models import GpuModel, Job, LocalQueue, PriorityClass
from scheduling.engine.mig import parse_mig_profile


class JobForm(forms.Form):
    name = forms.CharField(max_length=100, required=False)
    queue = forms.ChoiceField(help_text="team / local queue")
    kind = forms.ChoiceField(choices=Job.Kind.choices, initial=Job.Kind.TRAINING)
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

    def __init__(self, *args, queues: list[LocalQueue], **kwargs):
        super().__init__(*args, **kwargs)
        self.choice_field("queue").choices = [(f"{q.team.slug}/{q.name}", f"{q.team.slug} / {q.name}") for q in queues]
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

    def choice_field(self, name: str) -> forms.ChoiceField:
        field = self.fields[name]
        assert isinstance(field, forms.ChoiceField)
        return field


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
