"""Cost pages: the dashboard (plotly) and a team's monthly invoice (HTML and CSV).

Views read the request, call selectors and render; figures are built in ``billing.charts``.
"""

from __future__ import annotations

import csv
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone

from billing import charts
from billing.api.params import parse_window
from billing.core.advice import CENTS
from billing.core.allocation import IDLE
from billing.core.units import epoch_us, hours_between
from billing.core.windows import month_start, next_month
from billing.selectors import AllocationQuery, cost_allocation, team_efficiency_list
from billing.selectors.allocation import SharedReads, cost_totals
from billing.selectors.breakdown import cost_by_quota_use, cost_by_user_and_label
from billing.selectors.efficiency import job_recommendation_list
from billing.selectors.forecast import month_forecast_list
from billing.selectors.invoices import Invoice, invoice_get
from portal.pages.charts import figure_html
from portal.tenants.models import Team
from portal.tenants.selectors import team_list_for_user

WINDOWS = {"24h": 1, "7d": 24, "30d": 24, "month": 24, "lastmonth": 24}  # window → step in hours


def _window_query(request: HttpRequest, now: datetime) -> tuple[str, AllocationQuery]:
    window_text = request.GET.get("window", "7d")
    if window_text not in WINDOWS:
        window_text = "7d"
    start, end = parse_window(window_text, now)
    teams = team_list_for_user(user=request.user)
    team_ids = None if request.user.is_staff else frozenset(teams.values_list("pk", flat=True))
    step_hours = WINDOWS[window_text]
    return window_text, AllocationQuery(
        start=start, end=end, step_hours=step_hours, aggregate="namespace", team_ids=team_ids
    )


@login_required
def cost_dashboard(request: HttpRequest) -> HttpResponse:
    now = timezone.now()
    window_text, query = _window_query(request, now)
    start, end, step_hours = query.start, query.end, query.step_hours
    teams = team_list_for_user(user=request.user)
    shared = SharedReads()  # the price book, teams and running jobs, read once for the three allocations
    by_namespace = cost_allocation(query, now=now, shared=shared)
    # The model charts show window totals: one step, not the page's steps (the same totals, fewer rows).
    whole = hours_between(query.start, query.end)
    by_model = cost_totals(
        replace(query, aggregate="gpu_model", show_idle=False, step_hours=whole), now=now, shared=shared
    )
    figures = charts.cost_dashboard_figures(by_namespace, by_model)
    this_month = month_start(now)
    query_string = f"window={window_text}&aggregate=namespace&step={step_hours}h"
    return render(
        request,
        "billing/dashboard.html",
        {
            "window": window_text,
            "as_of": now,
            "as_of_us": epoch_us(now),  # the breakdown fragment's figures run up to the same time
            "windows": list(WINDOWS),
            "start": start,
            "end": end,
            "charts": {name: figure_html(figure) for name, figure in figures.items()},
            "totals": by_namespace.group_totals(),
            "idle_total": by_namespace.totals.get(IDLE),
            "months_ahead": month_forecast_list(teams=teams, now=now, shared=shared),
            # The page's own "This month" card says each team's budget with today's figure: the
            # site-wide banner (which names the threshold crossed) would only repeat it.
            "budget_alerts": [],
            "teams": teams,
            "months": [this_month, month_start(this_month - timedelta(days=1))],
            "csv_url": f"{reverse('billing:api-cost-allocation')}?{query_string}&format=csv",
            "api_url": f"{reverse('billing:api-cost-allocation')}?{query_string}",
        },
    )


AS_OF_KEPT = timedelta(minutes=10)  # a page's own time, kept by its fragments for this long


def _as_of(request: HttpRequest) -> datetime:
    """The time a fragment's figures run up to: its page's (``as_of``, POSIX microseconds), so that the
    breakdown loaded after the page adds up to the page's totals (running jobs accrue cost every
    second); now when it is absent, malformed, in the future or older than ``AS_OF_KEPT``."""
    now = timezone.now()
    try:
        at = datetime.fromtimestamp(int(request.GET.get("as_of", "")) / 1_000_000, tz=UTC)
    except (ValueError, OverflowError, OSError):
        return now
    return at if now - AS_OF_KEPT <= at <= now else now


@login_required
def cost_breakdown(request: HttpRequest) -> HttpResponse:
    """The page's breakdowns over its window (an htmx fragment, loaded after the page): by user, by a
    label, guaranteed vs borrowed quota."""
    now = _as_of(request)
    window_text, query = _window_query(request, now)
    breakdown = cost_by_user_and_label(query, key=request.GET.get("label", ""), now=now)
    return render(
        request,
        "billing/_breakdown.html",
        {
            "window": window_text,
            "as_of": now,
            "as_of_us": epoch_us(now),
            "by_user": breakdown.by_user,
            "label_keys": breakdown.label_keys,
            "label": breakdown.label,
            "by_label": breakdown.by_label,
            "quota_use": cost_by_quota_use(start=query.start, end=query.end, now=now, team_ids=query.team_ids),
        },
    )


@login_required
def cost_recommendations(request: HttpRequest) -> HttpResponse:
    """The page's advice over its window (an htmx fragment, loaded after the page): per team, and the least
    efficient jobs (they read the usage records of the window, the page's slowest part)."""
    now = timezone.now()
    window_text, query = _window_query(request, now)
    teams = team_list_for_user(user=request.user)
    return render(
        request,
        "billing/_recommendations.html",
        {
            "window": window_text,
            "jobs": job_recommendation_list(teams=teams, since=query.start, until=query.end),
            "team_efficiency": team_efficiency_list(teams=teams, since=query.start, until=query.end),
        },
    )


def _invoice(request: HttpRequest, slug: str, year: int, month: int) -> tuple[Team, Invoice]:
    team = team_list_for_user(user=request.user).filter(slug=slug).first()
    if team is None:
        raise Http404("no such team")
    try:
        first = datetime(year, month, 1, tzinfo=UTC)
        next_month(first)  # December 9999 ends past what datetime can hold
    except (ValueError, OverflowError):
        raise Http404("no such month") from None
    return team, invoice_get(team=team, month=first, now=timezone.now())


@login_required
def invoice(request: HttpRequest, slug: str, year: int, month: int) -> HttpResponse:
    team, bill = _invoice(request, slug, year, month)
    return render(
        request,
        "billing/invoice.html",
        {
            "team": team,
            "month": bill.month,
            "lines": bill.lines,
            "total": bill.total_cost.quantize(CENTS),
            "gpu_hours": bill.gpu_hours,
            "partial": bill.partial,
            "csv_url": reverse("billing:invoice-csv", args=[team.slug, year, month]),
        },
    )


@login_required
def invoice_csv(request: HttpRequest, slug: str, year: int, month: int) -> HttpResponse:
    team, bill = _invoice(request, slug, year, month)
    first = bill.month
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="invoice-{team.slug}-{first:%Y-%m}.csv"'
    writer = csv.writer(response)
    writer.writerow(
        ["team", "namespace", "month", "gpu_model", "capacity_type", "gpu_hours", "gpu_cost_usd",
         "cpu_core_hours", "cpu_cost_usd", "ram_gib_hours", "ram_cost_usd", "total_cost_usd"]
    )  # fmt: skip
    for line in bill.lines:
        writer.writerow(
            [team.slug, team.namespace, f"{first:%Y-%m}", line.gpu_model, line.capacity_type, line.gpu_hours,
             line.gpu_cost, line.cpu_core_hours, line.cpu_cost, line.ram_gib_hours, line.ram_cost, line.total_cost]
        )  # fmt: skip
    writer.writerow([team.slug, team.namespace, f"{first:%Y-%m}", "total", "", "", "", "", "", "", "", bill.total_cost])
    return response
