"""The cluster page, a node's page, and the Queues and fairness page (reads through portal.ops.selectors)."""

from __future__ import annotations

import re
from pathlib import Path

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import render
from django.utils import timezone

from portal.jobs import selectors
from portal.jobs.models import QuotaChange
from portal.ops.selectors import cluster_view, node_view, queue_overview
from portal.ops.selectors.queues import sample_series
from portal.pages import charts
from scheduling.selectors import capacity_wanted, node_pool_list

FILTERS = ("gpu_model", "pool", "rack", "state")
FAIR_SHARE_SECTION = "## Admission order and fair share"


def _filter(request, name: str) -> str:
    return request.GET.get(name, "").strip()[:253]


@login_required
def cluster(request):
    view = cluster_view(user=request.user, **{name: _filter(request, name) for name in FILTERS})
    return render(request, "portal/cluster.html", {"view": view, "now": timezone.now()})


@login_required
def cluster_node(request, name: str):
    node = node_view(user=request.user, name=name)
    if node is None:
        raise Http404("No such node")
    return render(request, "portal/cluster_node.html", {"node": node})


@login_required
def queue_list(request):
    now = timezone.now()
    overview = queue_overview(user=request.user, now=now)
    return render(
        request,
        "portal/queue_list.html",
        {
            "overview": overview,
            "now": now,
            "local_queues": selectors.local_queue_list(user=request.user),
            "node_pools": node_pool_list(),
            "capacity_wanted": capacity_wanted(user=request.user),
            "capacity_all_teams": request.user.is_staff,
            "quota_changes": QuotaChange.objects.select_related("cluster_queue", "changed_by")[:50],
        },
    )


@login_required
def queue_charts(request):
    """The Queues page's charts, which the page loads after it is shown (htmx): a week of samples."""
    figures = [
        (name, charts.figure_dict_html(charts.queue_history_figure(name, series)))
        for name, series in sorted(sample_series(now=timezone.now()).items())
    ]
    return render(request, "portal/_queue_charts.html", {"figures": figures})


@login_required
def fair_share_formula(request):
    """The fair-share section of docs/engine.md, as the page links it (one text for both)."""
    path = Path(settings.BASE_DIR) / "docs" / "engine.md"
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    match = re.search(re.escape(FAIR_SHARE_SECTION) + r"\n(.*?)(?=\n## )", text, re.S)
    if match is None:
        raise Http404("The formula's documentation is not installed")
    return render(request, "portal/fair_share.html", {"section": match.group(1).strip()})
