"""The schedules page: a team's job schedules with their next and latest runs, and a form to add one.
The form builds the same request as ``POST /api/v1/schedules/`` and goes through the same service."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render

from portal.api.job_create import job_spec_from_body
from portal.jobs.errors import ServiceError
from portal.jobs.selectors import local_queue_list
from portal.pages.forms import queue_choices
from portal.schedules.models import JobSchedule
from portal.schedules.selectors import schedule_list, schedule_runs
from portal.schedules.services import schedule_create


class ScheduleForm(forms.Form):
    name = forms.SlugField(max_length=100, initial="nightly-eval")
    cron = forms.CharField(max_length=120, initial="0 2 * * *", help_text="minute hour day-of-month month day-of-week")
    timezone = forms.CharField(max_length=64, initial="UTC", help_text="IANA zone, e.g. Europe/Berlin")
    concurrency_policy = forms.ChoiceField(choices=JobSchedule.ConcurrencyPolicy.choices)
    queue = forms.ChoiceField(help_text="team / local queue of the job")
    image = forms.CharField(max_length=500, initial="nvcr.io/nvidia/pytorch:24.08-py3")
    command = forms.CharField(max_length=2000, required=False, initial="python eval.py")
    gpu = forms.IntegerField(initial=1, min_value=0, label="Whole GPUs")
    runtime_s = forms.IntegerField(initial=3600, min_value=1, label="Requested runtime (s)")
    off_peak = forms.BooleanField(required=False, label="Off-peak (starts only in the off-peak hours, lower price)")

    def __init__(self, *args, queues, **kwargs):
        super().__init__(*args, **kwargs)
        field = self.fields["queue"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = queue_choices(queues)


@login_required
def schedule_list_page(request):
    form = ScheduleForm(request.POST or None, queues=list(local_queue_list(user=request.user)))
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        team, queue = data["queue"].split("/", 1)
        job = {"team": team, "queue": queue, "image": data["image"], "gpu": data["gpu"], "runtime_s": data["runtime_s"]}
        job.update({"off_peak": data["off_peak"], "command": data["command"] or []})
        try:
            schedule = schedule_create(
                owner=request.user,
                name=data["name"],
                cron=data["cron"],
                zone=data["timezone"],
                job=job,
                spec_of=job_spec_from_body,
                concurrency_policy=data["concurrency_policy"],
            )
        except ServiceError as exc:
            field = (exc.field or "").removeprefix("job.")
            form.add_error(field if field in form.fields else None, exc.message)
        else:
            messages.success(
                request, f"Schedule {schedule.name} created; next run {schedule.next_run_at:%Y-%m-%d %H:%M} UTC."
            )
            return redirect("schedule-list")
    rows = [(s, schedule_runs(schedule=s, limit=3)) for s in schedule_list(user=request.user)[:100]]
    status = 400 if form.errors else 200
    return render(request, "schedules/schedule_list.html", {"form": form, "rows": rows}, status=status)
