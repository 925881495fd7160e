"""Browser pages. Each view reads through selectors and writes through services."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db import connection
from django.db.models import Q
from django.http import Http404, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone

from billing.selectors import (
    gpu_hours_by_team_and_day,
    job_costs,
    job_list_costed,
    job_ordering,
    list_figures,
    run_interval_list,
)
from billing.selectors.idle import job_idle_flag_list
from portal.api.answers import check_data
from portal.api.job_create import JobCreateSerializer
from portal.jobs import selectors, services
from portal.jobs.errors import ServiceError
from portal.jobs.models import GpuModel
from portal.jobs.states import CANCELLABLE_STATES, FINAL_STATES, JobState
from portal.pages import charts
from portal.pages.forms import JobForm, mig_profile_choices
from portal.tenants.selectors import team_list_for_user
from scheduling.adapters.factory import cluster_backend
from scheduling.selectors import node_pools_of, runtime_speedup, topology_level_labels, training_environment


def healthz(request):
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok"})


@login_required
def home(request):
    return redirect("job-list")


# The list's columns: (label, sort key or None, first click sorts descending).
JOB_COLUMNS = (
    ("Id", None, False),
    ("Name", None, False),
    ("Owner", "owner", False),
    ("Team / queue", None, False),
    ("State", "state", False),
    ("Resources", None, False),
    ("Why / where", None, False),
    ("Run time", "run", True),
    ("GPU-hours", "gpu_hours", True),
    ("Cost", "cost", True),
    ("Submitted", "submitted", True),
)


def sort_columns(sort: str) -> list[dict]:
    """Header cells: each sortable one links to its sort, toggling direction when it is the current one."""
    cells = []
    for label, key, descending_first in JOB_COLUMNS:
        cell: dict = {"label": label, "key": key, "arrow": ""}
        if key is not None:
            if sort.lstrip("-") == key:
                cell["arrow"] = "▼" if sort.startswith("-") else "▲"
                cell["next"] = key if sort.startswith("-") else f"-{key}"
            else:
                cell["next"] = f"-{key}" if descending_first else key
        cells.append(cell)
    return cells


@login_required
def job_list(request):
    now = timezone.now()
    jobs = job_list_for_page(request)
    sort, ordering = job_ordering(request.GET.get("sort", ""))
    costed = job_list_costed(selectors.with_last_nodes(jobs), now=now).order_by(*ordering)
    paginator = Paginator(costed, 25)
    page = paginator.get_page(request.GET.get("page"))
    context = {
        "page": page,
        "rows": [(job, list_figures(job)) for job in page.object_list],
        "states": JobState.values,
        "teams": team_list_for_user(user=request.user),
        "filters": {k: request.GET.get(k, "") for k in ("state", "team", "q")},
        "sort": sort,
        "columns": sort_columns(sort),
        "total": paginator.count,
        "refresh_s": settings.LIVE_REFRESH_S,
    }
    if request.htmx:
        return render(request, "portal/_job_rows.html", context)
    return render(request, "portal/job_list.html", context)


def job_list_for_page(request):
    jobs = selectors.job_list(user=request.user)
    if state := request.GET.get("state"):
        jobs = jobs.filter(state=state)
    if team := request.GET.get("team"):
        jobs = jobs.filter(team__slug=team)
    if q := request.GET.get("q", "").strip():
        jobs = jobs.filter(Q(name__icontains=q) | Q(image__icontains=q) | Q(pk=int(q) if q.isdigit() else None))
    return jobs


def form_error(form: JobForm, field: str | None, message: str) -> None:
    """An API or service error on the form: beside its field (shown with the field's label), or, for a
    field the form does not have, at the top with a readable name instead of the API's."""
    root = (field or "").split(".", 1)[0]
    if field in form.fields:
        form.add_error(field, message)
    elif root in form.fields:  # a path inside a structured field: ray.worker_groups.0.gpu
        form.add_error(root, f"{field}: {message}")
    else:
        name = (field or "").replace("_", " ").capitalize()
        form.add_error(None, f"{name}: {message}" if name and field != "non_field_errors" else message)


def form_spec(request, form: JobForm) -> services.JobSpec | None:
    """The job request a valid form holds, checked as the API checks a body (errors go on the form)."""
    if not form.is_valid():
        return None
    data = {k: v for k, v in form.cleaned_data.items() if v not in (None, "")}
    data.setdefault("allowed_gpu_models", [])
    serializer = JobCreateSerializer(data=data, context={"request": request})
    if serializer.is_valid():
        return serializer.to_spec()
    for field, errors in serializer.errors.items():
        for error in errors if isinstance(errors, list) else [errors]:
            form_error(form, field, str(error))
    return None


@login_required
def job_create(request):
    queues = list(selectors.local_queue_list(user=request.user))
    if request.method == "POST":
        form = JobForm(request.POST, queues=queues)
        spec = form_spec(request, form)
        if spec is not None:
            try:
                job = services.job_submit(owner=request.user, spec=spec)
            except ServiceError as exc:
                form_error(form, exc.field, exc.message)
            else:
                messages.success(request, f"Job {job.pk} submitted.")
                return redirect("job-detail", pk=job.pk)
    else:
        form = JobForm(queues=queues)
    return render(
        request,
        "portal/job_form.html",
        {"form": form, "check_url": reverse("job-check")},
        status=400 if form.errors else 200,
    )


@login_required
def job_check(request):
    """The submit form's live dry run (htmx posts the form as the user edits it): what the next cycle
    decides for the job, when it would start and what it would cost, or what is wrong with the form."""
    if request.method != "POST":
        return redirect("job-create")
    form = JobForm(request.POST, queues=list(selectors.local_queue_list(user=request.user)))
    errors: list[str] = []
    check = None
    as_of = None
    spec = form_spec(request, form)
    if spec is not None:
        try:
            result = services.job_check_spec(spec=spec)
            check = check_data(result, user=request.user)
            as_of = result.answer.as_of  # the state answered from: the last cycle's, at most DRY_RUN_STALE_S old
        except ServiceError as exc:
            form_error(form, exc.field, exc.message)
    for field, problems in form.errors.items():
        label = form.fields[field].label or field.replace("_", " ").capitalize() if field in form.fields else ""
        errors += [f"{label}: {p}" if label else str(p) for p in problems]
    return render(request, "portal/_job_check.html", {"check": check, "errors": errors, "as_of": as_of})


def _visible_job(request, pk: int):
    job = selectors.job_get(user=request.user, pk=pk)
    if job is None:
        raise Http404("No such job")
    return job


def job_live_context(job, *, now) -> dict:
    """What the live part of a job's page shows: state, reason, attempts with their figures."""
    cost = job_costs(jobs=[job], now=now, speedup=runtime_speedup())[job.pk]
    attempts = list(selectors.job_attempt_list(job=job))
    # The node pool of each replica's node (where placement is explained), for the attempts' tables.
    pools = node_pools_of({p.get("node", "") for a in attempts for p in a.placements or ()})
    return {
        "job": job,
        "now": now,
        "cost": cost,
        "attempts": [
            (a, cost.attempts[a.number], [(p, pools.get(p.get("node", ""))) for p in a.placements or ()])
            for a in attempts
        ],
        "current": attempts[-1] if attempts and attempts[-1].ended_at is None else None,
        "last_attempt": attempts[-1] if attempts else None,
        "placements": job.placements.all(),
        "show_pools": any(pools.values()),
        "transitions": job.transitions.all(),
        "cancellable": job.state in CANCELLABLE_STATES,
        "final": job.state in FINAL_STATES,
        "refresh_s": settings.LIVE_REFRESH_S,
        "idle_flags": list(job_idle_flag_list(job=job)),
    }


@login_required
def job_mig_profiles(request):
    """The MIG profile options for the GPU models ticked on the submit form (htmx swaps them in)."""
    choices = mig_profile_choices(list(GpuModel.objects.all()), request.GET.getlist("allowed_gpu_models"))
    return render(
        request, "portal/_mig_options.html", {"choices": choices, "selected": request.GET.get("mig_profile", "")}
    )


@login_required
def job_detail(request, pk: int):
    job = _visible_job(request, pk)
    context = job_live_context(job, now=timezone.now())
    if request.htmx:
        return render(request, "portal/_job_live.html", context)
    context["allowed_models"] = ", ".join(g.name for g in job.allowed_gpu_models.all()) or "any"
    context["rules"] = selectors.job_placement_rules(job=job, levels=topology_level_labels())
    context["training_env"] = training_environment(job=job)
    speedup = runtime_speedup()
    context["runtime_here_s"] = job.runtime_s / speedup if speedup != 1 else None
    context["speedup"] = speedup
    return render(request, "portal/job_detail.html", context)


@login_required
def job_cancel(request, pk: int):
    """GET: what cancelling would stop, and a button to confirm (works without JavaScript). POST with
    ``confirm``: cancel. A POST without it (an old form, a stray click) only shows the confirmation."""
    job = _visible_job(request, pk)
    if request.method == "POST" and request.POST.get("confirm") == "yes":
        try:
            services.job_cancel(job=job, by=request.user)
            messages.success(request, f"Job {job.pk} cancelled.")
        except ServiceError as exc:
            messages.error(request, exc.message)
        return redirect("job-detail", pk=job.pk)
    if job.state not in CANCELLABLE_STATES:
        messages.error(request, f"A {job.state} job cannot be cancelled.")
        return redirect("job-detail", pk=job.pk)
    return render(request, "portal/job_cancel.html", job_live_context(job, now=timezone.now()))


def running_intervals(*, since, now) -> list[tuple]:
    """(start, end, gpu_model, gpus) of every Running interval overlapping [since, now]; open ones end now."""
    return [
        (interval.start, interval.end, interval.gpu_model or "CPU", gpus)
        for interval in run_interval_list(since=since, now=now)
        if (gpus := float(interval.detail.get("gpus") or 0)) > 0
    ]


def _int_param(request, name: str, *, default: int, low: int, high: int) -> int:
    raw = request.GET.get(name, "")
    return min(max(int(raw), low), high) if raw.isdigit() else default


@login_required
def dashboard(request):
    now = timezone.now()
    hours = _int_param(request, "hours", default=168, low=1, high=24 * 31)
    since = now - timedelta(hours=hours)
    teams = team_list_for_user(user=request.user)
    nodes = cluster_backend().nodes()
    capacity = sum(n.gpu_count for n in nodes)
    # Cluster-wide allocation (totals by GPU model, no job details), so every user sees how full it is.
    times, series = charts.allocation_series(running_intervals(since=since, now=now), start=since, end=now)
    days = 14
    per_team = gpu_hours_by_team_and_day(teams=teams, days=days, now=now)
    return render(
        request,
        "portal/dashboard.html",
        {
            "allocation_chart": charts.figure_html(charts.allocation_figure(times, series, capacity)),
            "gpu_hours_chart": charts.figure_html(charts.gpu_hours_figure(per_team, days=charts.day_labels(now, days))),
            "capacity": capacity,
            "allocated_now": round(selectors.gpus_allocated(), 2),
            "node_count": len(nodes),
            "hours": hours,
            "team_totals": {team: round(sum(v.values()), 2) for team, v in sorted(per_team.items())},
        },
    )
