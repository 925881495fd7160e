"""Pages of inference services: the list with a form to start one, and a service's replicas over time
against its load. The form goes through the API's serializer and the service (one set of rules)."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from portal.jobs.errors import ServiceError
from portal.jobs.selectors import local_queue_list
from portal.pages.charts import figure_html, service_figure
from portal.pages.forms import queue_choices
from portal.serving.api import ServiceCreateSerializer, ServiceSerializer
from portal.serving.models import InferenceService
from portal.serving.selectors import service_list, service_samples
from portal.serving.services import service_create, service_stop


class ServiceForm(forms.Form):
    name = forms.CharField(max_length=63, initial="chat")
    queue = forms.ChoiceField(help_text="team / local queue")
    image = forms.CharField(max_length=500, initial="vllm/vllm-openai:v0.6.0")
    model_family = forms.CharField(max_length=63, required=False, initial="llama")
    model_size_b = forms.IntegerField(
        required=False,
        initial=13,
        label="Model size (billions of parameters)",
        help_text="7B = 13 GiB, 13B = 26 GiB, 70B = 140 GiB (2 x 80 GB GPUs)",
    )
    gpu_memory_gib = forms.IntegerField(required=False, label="or GPU memory per replica (GiB)")
    min_replicas = forms.IntegerField(initial=1)
    max_replicas = forms.IntegerField(initial=3)
    metric = forms.ChoiceField(choices=InferenceService.Metric.choices)
    target_per_replica = forms.FloatField(initial=20, label="Target per replica")
    preemptible = forms.BooleanField(required=False, label="Replicas may run on spot capacity")

    def __init__(self, *args, queues, **kwargs):
        super().__init__(*args, **kwargs)
        field = self.fields["queue"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = queue_choices(queues)


@login_required
def service_list_page(request):
    queues = list(local_queue_list(user=request.user))
    form = ServiceForm(request.POST or None, queues=queues)
    if request.method == "POST" and form.is_valid():
        data = {k: v for k, v in form.cleaned_data.items() if v not in (None, "")}
        data["team"], data["queue"] = data["queue"].split("/", 1)
        serializer = ServiceCreateSerializer(data=data, context={"request": request})
        if serializer.is_valid():
            try:
                service = service_create(owner=request.user, spec=serializer.to_spec())
            except ServiceError as exc:
                form.add_error(exc.field if exc.field in form.fields else None, exc.message)
            else:
                messages.success(request, f"Service {service.name} started.")
                return redirect("service-detail", pk=service.pk)
        else:
            for name, errors in serializer.errors.items():
                for error in errors if isinstance(errors, list) else [errors]:
                    form.add_error(name if name in form.fields else None, str(error))
    services = ServiceSerializer(service_list(user=request.user).order_by("-created_at")[:100], many=True).data
    status = 400 if form.errors else 200
    return render(request, "serving/service_list.html", {"form": form, "services": services}, status=status)


@login_required
def service_detail_page(request, pk: int):
    service = service_list(user=request.user).filter(pk=pk).first()
    if service is None:
        raise Http404("no such service")
    samples = [
        {"at": s.at, "load": s.load, "running": s.running, "desired": s.desired}
        for s in service_samples(service=service)
    ]
    chart = figure_html(service_figure(service.name, samples, target=service.target_per_replica, metric=service.metric))
    context = {"service": ServiceSerializer(service).data, "chart": chart, "samples": samples[-20:][::-1]}
    return render(request, "serving/service_detail.html", context)


@login_required
@require_POST
def service_stop_page(request, pk: int):
    service = service_list(user=request.user).filter(pk=pk).first()
    if service is None:
        raise Http404("no such service")
    try:
        service_stop(service=service, by=request.user)
    except ServiceError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Service {service.name} stopped; its replicas were cancelled.")
    return redirect("service-detail", pk=pk)
