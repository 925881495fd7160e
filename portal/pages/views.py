"""Browser pages. Each view reads through selectors and writes through services."""

from __future__ import annotations

from datetime import timedelta
from functools import lru_cache

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db import connection
from django.db.models import Q
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from billing.selectors import gpu_hours_by_team_and_day, run_interval_list
from portal.api.serializers import JobCreateSerializer
from portal.jobs import selectors, services
from portal.jobs.errors import ServiceError
from portal.jobs.models import QuotaChange
from portal.jobs.states import CANCELLABLE_STATES, JobState
from portal.pages import charts
from portal.pages.forms import JobForm
from portal.tenants.selectors import team_list_for_user
from scheduling.adapters.factory import cluster_backend
from scheduling.selectors import node_pool_list, node_pools_of, topology_level_labels


def healthz(request):
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok"})


@lru_cache(maxsize=1)
def _plotly_bundle() -> str:
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def plotly_js(request):
    response = HttpResponse(_plotly_bundle(), content_type="application/javascript")
    response["Cache-Control"] = "public, max-age=86400"
    return response


@login_required
def home(request):
    return redirect("job-list")


@login_required
def job_list(request):
    jobs = job_list_for_page(request)
    paginator = Paginator(jobs, 25)
    page = paginator.get_page(request.GET.get("page"))
    return render(
        request,
        "portal/job_list.html",
        {
            "page": page,
            "jobs": page.object_list,
            "states": JobState.values,
            "teams": team_list_for_user(user=request.user),
            "filters": {k: request.GET.get(k, "") for k in ("state", "team", "q")},
            "total": jobs.count(),
        },
    )


def job_list_for_page(request):
    jobs = selectors.job_list(user=request.user).prefetch_related("placements")
    if state := request.GET.get("state"):
        jobs = jobs.filter(state=state)
    if team := request.GET.get("team"):
        jobs = jobs.filter(team__slug=team)
    if q := request.GET.get("q", "").strip():
        jobs = jobs.filter(Q(name__icontains=q) | Q(image__icontains=q) | Q(pk=int(q) if q.isdigit() else None))
    return jobs


@login_required
def job_create(request):
    queues = list(selectors.local_queue_list(user=request.user))
    if request.method == "POST":
        form = JobForm(request.POST, queues=queues)
        if form.is_valid():
            data = {k: v for k, v in form.cleaned_data.items() if v not in (None, "")}
            data.setdefault("allowed_gpu_models", [])
            serializer = JobCreateSerializer(data=data, context={"request": request})
            if serializer.is_valid():
                try:
                    job = services.job_submit(owner=request.user, spec=serializer.to_spec())
                except ServiceError as exc:
                    form.add_error(exc.field if exc.field in form.fields else None, exc.message)
                else:
                    messages.success(request, f"Job {job.pk} submitted.")
                    return redirect("job-detail", pk=job.pk)
            else:
                for field, errors in serializer.errors.items():
                    for error in errors if isinstance(errors, list) else [errors]:
                        form.add_error(field if field in form.fields else None, str(error))
    else:
        form = JobForm(queues=queues)
    return render(request, "portal/job_form.html", {"form": form}, status=400 if form.errors else 200)


@login_required
def job_detail(request, pk: int):
    job = selectors.job_get(user=request.user, pk=pk)
    if job is None:
        raise Http404("No such job")
    placements = list(job.placements.all())
    pools = node_pools_of({p.node for p in placements}) if placements else {}
    return render(
        request,
        "portal/job_detail.html",
        {
            "job": job,
            "placements": [(p, pools.get(p.node)) for p in placements],
            "show_pools": any(pools.values()),
            "rules": selectors.job_placement_rules(job=job, levels=topology_level_labels()),
            "transitions": job.transitions.all(),
            "allowed_models": ", ".join(g.name for g in job.allowed_gpu_models.all()) or "any",
            "cancellable": job.state in CANCELLABLE_STATES,
        },
    )


@login_required
@require_POST
def job_cancel(request, pk: int):
    job = selectors.job_get(user=request.user, pk=pk)
    if job is None:
        raise Http404("No such job")
    try:
        services.job_cancel(job=job, by=request.user)
        messages.success(request, f"Job {job.pk} cancelled.")
    except ServiceError as exc:
        messages.error(request, exc.message)
    return redirect("job-detail", pk=job.pk)


@login_required
def queue_list(request):
    changes = QuotaChange.objects.select_related("cluster_queue", "changed_by")[:50]
    return render(
        request,
        "portal/queue_list.html",
        {
            "local_queues": selectors.local_queue_list(user=request.user),
            "cluster_queues": selectors.cluster_queue_list(),
            "node_pools": node_pool_list(),
            "quota_changes": changes,
        },
    )


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
