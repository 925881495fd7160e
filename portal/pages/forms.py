"""The job submission form. It renders fields; validation runs through the API serializer and the
service, so the page and the API enforce exactly the same rules."""

from __future__ import annotations

from django import forms

from portal.jobs.models import GpuModel, Job, LocalQueue, PriorityClass


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
    mig_profile = forms.CharField(max_length=20, required=False, label="MIG profile")
    gpu_memory_gib = forms.IntegerField(initial=0, label="GPU memory (GiB)")
    cpu_milli = forms.IntegerField(initial=4000, label="CPU (milli-cores)")
    memory_mib = forms.IntegerField(initial=16384, label="Memory (MiB)")
    allowed_gpu_models = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple)
    priority_class = forms.ChoiceField()
    runtime_s = forms.IntegerField(initial=3600, label="Requested runtime (s)")

    def __init__(self, *args, queues: list[LocalQueue], **kwargs):
        super().__init__(*args, **kwargs)
        self.choice_field("queue").choices = [(f"{q.team.slug}/{q.name}", f"{q.team.slug} / {q.name}") for q in queues]
        self.choice_field("allowed_gpu_models").choices = [(g.name, g.name) for g in GpuModel.objects.all()]
        priorities = list(PriorityClass.objects.order_by("value"))
        self.choice_field("priority_class").choices = [(p.name, f"{p.name} ({p.value})") for p in priorities]
        default = next((p.name for p in priorities if p.name == "default"), priorities[0].name if priorities else None)
        self.fields["priority_class"].initial = default

    def choice_field(self, name: str) -> forms.ChoiceField:
        field = self.fields[name]
        assert isinstance(field, forms.ChoiceField)
        return field
