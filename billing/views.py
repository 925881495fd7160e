"""Cost pages: the dashboard (plotly) and a team's monthly invoice (HTML and CSV).

Views read through selectors and hold no cost rules; figures are built in ``billing.charts``.
"""

from __future__ import annotations

import csv
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone

from billing import charts, pricing
from billing.selectors import (
    AllocationQuery,
    budget_alert_list,
    budget_status_list,
    cost_allocation,
    invoice_lines,
    job_efficiency_list,
    team_efficiency_list,
)
from portal.pages.charts import figure_html
from portal.tenants.selectors import team_list_for_user

WINDOWS = {"24h": 1, "7d": 24, "30d": 24, "month": 24, "lastmonth": 24}


TOP_GROUPS = 12  # charts show the costliest groups and one "other" series: 100 stacked series are unreadable


def _series(allocation: pricing.Allocation, attribute: str, *, skip: tuple[str, ...] = ()) -> dict[str, list[float]]:
    """One series per group over the steps: the ``TOP_GROUPS`` costliest, the rest summed as "other"."""
    ranked = sorted(
        (n for n in allocation.totals if n not in skip), key=lambda n: (-allocation.totals[n].total_cost, n)
    )
    top, rest = ranked[:TOP_GROUPS], set(ranked[TOP_GROUPS:])
    series = {
        name: [float(getattr(groups[name], attribute)) if name in groups else 0.0 for _, _, groups in allocation.steps]
        for name in top
    }
    if rest:
        series["other"] = [
            sum(float(getattr(f, attribute)) for n, f in groups.items() if n in rest)
            for _, _, groups in allocation.steps
        ]
    return series


@login_required
def cost_dashboard(request):
    now = timezone.now()
    window_text = request.GET.get("window", "7d")
    if window_text not in WINDOWS:
        window_text = "7d"
    start, end = pricing.parse_window(window_text, now)
    step_hours = WINDOWS[window_text]
    teams = team_list_for_user(user=request.user)
    team_ids = None if request.user.is_staff else frozenset(teams.values_list("pk", flat=True))

    def query(aggregate: str, **extra) -> pricing.Allocation:
        return cost_allocation(
            AllocationQuery(
                start=start, end=end, step_hours=step_hours, aggregate=aggregate, team_ids=team_ids, **extra
            ),
            now=now,
        )

    by_namespace = query("namespace", show_idle=True)
    by_model = query("gpu_model", show_idle=False)
    times = [s for s, _, _ in by_namespace.steps]
    idle = pricing.IDLE
    namespaces = {n: f for n, f in by_namespace.totals.items() if n != idle}
    idle_models = by_namespace.idle_by_model  # admins only (empty for tenants)
    model_names = sorted(set(by_model.totals) | set(idle_models))
    zero = pricing.Figures(0, 0, 0, 0, 0, 0, 0, 0, None)
    jobs = job_efficiency_list(teams=teams, since=start, limit=50)
    charts_html = {
        "gpu_hours": figure_html(
            charts.stacked_over_time(
                times, _series(by_namespace, "gpu_hours", skip=(idle,)),
                title="GPU-hours per namespace", y_title="GPU-hours", bars=True,
            )
        ),
        "cost": figure_html(
            charts.stacked_over_time(
                times, _series(by_namespace, "total_cost", skip=(idle,)),
                title="Cost per namespace (USD)", y_title="USD", bars=True,
            )
        ),
        "models": figure_html(
            charts.by_category(
                model_names,
                {
                    "GPU-hours": [float(by_model.totals.get(m, zero).gpu_hours) for m in model_names],
                    "GPU cost (USD)": [float(by_model.totals.get(m, zero).gpu_cost) for m in model_names],
                    **(
                        {
                            "idle GPU-hours": [float(idle_models.get(m, zero).gpu_hours) for m in model_names],
                            "idle cost (USD)": [float(idle_models.get(m, zero).gpu_cost) for m in model_names],
                        }
                        if idle_models
                        else {}
                    ),
                },
                title="By GPU model", y_title="GPU-hours / USD",
            )
        ),
        "efficiency": figure_html(
            charts.efficiency_bars(
                list(namespaces),
                [None if f.gpu_efficiency is None else f.gpu_efficiency * 100 for f in namespaces.values()],
                low=pricing.LOW_UTILIZATION_PCT, high=pricing.HIGH_UTILIZATION_PCT,
            )
        ),
    }  # fmt: skip
    if idle in by_namespace.totals:
        charts_html["idle"] = figure_html(
            charts.stacked_over_time(
                times,
                {
                    "idle GPU-hours": _series(by_namespace, "gpu_hours")[idle],
                    "allocated GPU-hours": [
                        sum(float(f.gpu_hours) for n, f in groups.items() if n != idle)
                        for _, _, groups in by_namespace.steps
                    ],
                },
                title="Idle and allocated GPU capacity",
                y_title="GPU-hours",
            )
        )
    this_month = pricing.month_start(now)
    last_month = pricing.month_start(this_month - timedelta(days=1))
    query_string = f"window={window_text}&aggregate=namespace&step={step_hours}h"
    return render(
        request,
        "billing/dashboard.html",
        {
            "window": window_text,
            "windows": list(WINDOWS),
            "start": start,
            "end": end,
            "charts": charts_html,
            "totals": namespaces,
            "idle_total": by_namespace.totals.get(idle),
            "budgets": budget_status_list(teams=teams, now=now),
            "alerts": budget_alert_list(teams=teams, now=now),
            "jobs": [j for j in jobs if j.recommendation][:25],
            "team_efficiency": team_efficiency_list(teams=teams, since=start),
            "teams": teams,
            "months": [this_month, last_month],
            "csv_url": f"{reverse('billing:api-cost-allocation')}?{query_string}&format=csv",
            "api_url": f"{reverse('billing:api-cost-allocation')}?{query_string}",
        },
    )


def _invoice_context(request, slug: str, year: int, month: int):
    team = team_list_for_user(user=request.user).filter(slug=slug).first()
    if team is None:
        raise Http404("no such team")
    try:
        first = datetime(year, month, 1, tzinfo=UTC)
        pricing.next_month(first)  # December 9999 ends past what datetime can hold
    except (ValueError, OverflowError):
        raise Http404("no such month") from None
    now = timezone.now()
    lines = invoice_lines(team=team, month=first, now=now)
    return team, first, lines, now


@login_required
def invoice(request, slug: str, year: int, month: int):
    team, first, lines, now = _invoice_context(request, slug, year, month)
    total = sum((line.total_cost for line in lines), start=Decimal(0))
    return render(
        request,
        "billing/invoice.html",
        {
            "team": team,
            "month": first,
            "lines": lines,
            "total": total.quantize(Decimal("0.01")),
            "gpu_hours": sum((line.gpu_hours for line in lines), start=Decimal(0)),
            "partial": first <= now < pricing.next_month(first),
            "csv_url": reverse("billing:invoice-csv", args=[team.slug, year, month]),
        },
    )


@login_required
def invoice_csv(request, slug: str, year: int, month: int):
    team, first, lines, _ = _invoice_context(request, slug, year, month)
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="invoice-{team.slug}-{first:%Y-%m}.csv"'
    writer = csv.writer(response)
    writer.writerow(
        ["team", "namespace", "month", "gpu_model", "capacity_type", "gpu_hours", "gpu_cost_usd",
         "cpu_core_hours", "cpu_cost_usd", "ram_gib_hours", "ram_cost_usd", "total_cost_usd"]
    )  # fmt: skip
    for line in lines:
        writer.writerow(
            [team.slug, team.namespace, f"{first:%Y-%m}", line.gpu_model, line.capacity_type, line.gpu_hours,
             line.gpu_cost, line.cpu_core_hours, line.cpu_cost, line.ram_gib_hours, line.ram_cost, line.total_cost]
        )  # fmt: skip
    total = sum((line.total_cost for line in lines), start=Decimal(0))
    writer.writerow([team.slug, team.namespace, f"{first:%Y-%m}", "total", "", "", "", "", "", "", "", total])
    return response
