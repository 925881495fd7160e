"""What-if pages: the form (changes and a window) with recent runs, and one run's result.

Views parse the form, call the service or a selector and render; figures come from ``charts``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone

from portal.jobs.errors import ServiceError
from portal.pages.charts import figure_html
from portal.tenants.selectors import team_list_for_user
from portal.whatif import charts, selectors, services, start
from portal.whatif.models import WhatIfRun

WINDOW_DAYS = (1, 7, 14, 30)


def _blank(value: str) -> bool:
    return value.strip() == ""


def changes_from_form(post, cluster_queues, local_queues) -> dict:
    """The fields whose value differs from today's, as a change (``services.changes_validate`` checks
    it). An empty borrowing or lending limit means unlimited."""
    changes: dict = {}
    placement = post.get("placement", "")
    if placement:
        changes["placement"] = placement
    for cq in cluster_queues:
        cq_change: dict = {}
        weight = post.get(f"cq:{cq.name}:weight")
        if weight is not None and not _blank(weight) and weight.strip() != f"{cq.weight:g}":
            cq_change["weight"] = weight.strip()
        for f in cq.flavors:
            limits = {}
            for key in services.LIMITS:
                raw = post.get(f"fq:{cq.name}:{f.gpu_model}:{key}")
                if raw is None:
                    continue
                today = getattr(f, key)
                value = None if _blank(raw) else raw.strip()
                if value != (None if today is None else str(today)):
                    limits[key] = value
            if limits:
                cq_change.setdefault("flavors", {})[f.gpu_model] = limits
        if cq_change:
            changes.setdefault("cluster_queues", {})[cq.name] = cq_change
    for lq in local_queues:
        weight = post.get(f"lq:{lq.key}:weight")
        if weight is not None and not _blank(weight) and weight.strip() != f"{lq.weight:g}":
            changes.setdefault("local_queues", {})[lq.key] = {"weight": weight.strip()}
    return changes


LIMIT_WORDS = {"nominal_gpus": "nominal GPUs", "borrowing_limit": "borrowing limit", "lending_limit": "lending limit"}


def changes_summary(changes: dict) -> list[str]:
    """A change in words, one line per thing changed (``None`` limits read "no limit")."""
    lines = []
    if changes.get("placement"):
        lines.append(f"placement policy: {changes['placement']}")
    for name, change in (changes.get("cluster_queues") or {}).items():
        if "weight" in change:
            lines.append(f"{name}: fair-share weight {change['weight']:g}")
        for model, limits in (change.get("flavors") or {}).items():
            words = ", ".join(
                f"{LIMIT_WORDS[key]} {'no limit' if value is None else value}" for key, value in limits.items()
            )
            lines.append(f"{name} {model}: {words}")
    for name, change in (changes.get("local_queues") or {}).items():
        lines.append(f"{name}: fair-share weight {change['weight']:g}")
    return lines


@login_required
def whatif_index(request: HttpRequest) -> HttpResponse:
    if not selectors.whatif_allowed(user=request.user):
        raise PermissionDenied("platform and team admins only")
    cluster_queues, local_queues = selectors.whatif_settings(user=request.user)
    error, status, days = None, 200, 7
    if request.method == "POST":
        try:
            days = int(request.POST.get("days", "7"))
        except ValueError:
            days = 0
        try:
            if days not in WINDOW_DAYS:
                raise ServiceError(f"must be one of {', '.join(map(str, WINDOW_DAYS))}", field="days")
            now = timezone.now()
            run = start.whatif_start(
                user=request.user,
                changes=changes_from_form(request.POST, cluster_queues, local_queues),
                window_from=now - timedelta(days=days),
                window_to=now,
            )
            return redirect("whatif-run", pk=run.pk)
        except ServiceError as exc:
            error, status = str(exc), exc.status_code
    return render(
        request,
        "whatif/index.html",
        {
            "cluster_queues": cluster_queues,
            "local_queues": local_queues,
            "placements": services.PLACEMENTS,
            "window_days": WINDOW_DAYS,
            "days": days,
            "runs": [_summarized(r) for r in selectors.whatif_run_list(user=request.user)],
            "error": error,
            "admin": request.user.is_staff,
        },
        status=status,
    )


def _summarized(run: WhatIfRun) -> WhatIfRun:
    run.summary = changes_summary(run.changes)  # type: ignore[attr-defined]
    return run


def _teams_shown(request: HttpRequest, run: WhatIfRun) -> list[str]:
    """Platform admins see every team; a team admin sees their own teams' rows (and the cluster line)."""
    teams = list(run.result.get("teams", []))
    if request.user.is_staff:
        return teams
    mine = set(team_list_for_user(user=request.user).values_list("slug", flat=True))
    return [t for t in teams if t in mine]


def admission_rows(examples: list) -> list[dict]:
    """The check's differing admissions (job id, recorded, replayed; POSIX seconds, None = never) as
    table rows with times and the replay's lead (negative: the replay admitted earlier)."""

    def moment(seconds: float | None) -> datetime | None:
        return None if seconds is None else datetime.fromtimestamp(seconds, tz=UTC)

    return [
        {
            "job": int(job_id),
            "recorded": moment(recorded),
            "replayed": moment(replayed),
            "delta_s": None if recorded is None or replayed is None else replayed - recorded,
        }
        for job_id, recorded, replayed in examples
    ]


@login_required
def whatif_run(request, pk: int) -> HttpResponse:
    run = selectors.whatif_run_get(user=request.user, pk=pk)
    if run is None:
        raise Http404("no such what-if run")
    done = run.status == WhatIfRun.Status.DONE
    teams = _teams_shown(request, run) if done else []
    context = {"run": run, "done": done, "teams": teams, "changes": changes_summary(run.changes)}
    if done:
        result = run.result
        context["rows"] = [
            {
                "team": t,
                "recorded": result["recorded"][t],
                "whatif": result["whatif"][t],
                "baseline": result["baseline"][t],
            }
            for t in teams
        ]
        context["charts"] = {
            name: figure_html(figure) for name, figure in charts.comparison_figures(result, teams).items()
        }
        context["check"] = result["check"]
        context["differences"] = admission_rows(result["check"].get("examples") or [])
        context["cluster"] = result["cluster"]
    if request.htmx and not done:
        return render(request, "whatif/_progress.html", context)
    if request.htmx:  # finished while the page polled: the whole page, once
        response = HttpResponse()
        response["HX-Refresh"] = "true"
        return response
    return render(request, "whatif/run.html", context)
