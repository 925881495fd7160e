"""Plotly figures for the cost pages, built from plain data and the core's allocation values (no ORM).

Figures are chart data: amounts become floats here.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

import plotly.graph_objects as go

from billing.core.advice import HIGH_UTILIZATION_PCT, LOW_UTILIZATION_PCT
from billing.core.allocation import IDLE, Allocation, Figures
from portal.chart_layout import chart_layout, time_axis

LAYOUT = chart_layout(340)
TOP_GROUPS = 12  # charts show the costliest groups and one "other" series: 100 stacked series are unreadable


def stacked_over_time(
    times: list[datetime], series: dict[str, list[float]], *, title: str, y_title: str, bars: bool = False
) -> go.Figure:
    """One stacked trace per series name (e.g. GPU-hours per namespace per step)."""
    fig = go.Figure()
    for name, values in series.items():
        if bars:
            fig.add_trace(go.Bar(x=times, y=values, name=name))
        else:
            fig.add_trace(go.Scatter(x=times, y=values, name=name, stackgroup="one", mode="lines", line_shape="hv"))
    fig.update_layout(title=title, yaxis_title=y_title, barmode="stack", **LAYOUT)
    fig.update_xaxes(**time_axis(times))
    return fig


def by_category(labels: list[str], values: dict[str, list[float]], *, title: str, y_title: str) -> go.Figure:
    """Grouped bars: one bar group per label, one bar per value series (e.g. GPU-hours and cost per model)."""
    fig = go.Figure()
    for name, numbers in values.items():
        fig.add_trace(go.Bar(x=labels, y=numbers, name=name))
    fig.update_layout(title=title, yaxis_title=y_title, barmode="group", **LAYOUT)
    return fig


def efficiency_bars(labels: list[str], util_pct: list[float | None], *, low: float, high: float) -> go.Figure:
    """Average GPU utilization per group with the under-/over-use thresholds drawn across."""
    colors = [
        "#9aa5b1" if u is None else ("#d9534f" if u < low else "#f0ad4e" if u > high else "#5cb85c") for u in util_pct
    ]
    fig = go.Figure(go.Bar(x=labels, y=[u or 0 for u in util_pct], marker_color=colors, name="GPU utilization"))
    for level, text in ((low, f"{low:g} %: over-provisioned below"), (high, f"{high:g} %: GPU-bound above")):
        fig.add_hline(y=level, line_dash="dash", line_color="#888", annotation_text=text)
    fig.update_layout(title="GPU efficiency (GPU-hour weighted utilization)", yaxis_title="%", yaxis_range=[0, 100])
    fig.update_layout(**LAYOUT)
    return fig


def series_over_steps(allocation: Allocation, attribute: str, *, skip: tuple[str, ...] = ()) -> dict[str, list[float]]:
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


def cost_dashboard_figures(by_namespace: Allocation, by_model: Mapping[str, Figures]) -> dict[str, go.Figure]:
    """The cost page's charts: GPU-hours and cost per namespace over time, GPU-hours and cost per GPU
    model (``by_model``: window totals per model; two charts: one unit per axis), efficiency per
    namespace, and idle against allocated capacity when idle is shown (platform admins)."""
    times = [s for s, _, _ in by_namespace.steps]
    namespaces = by_namespace.group_totals()
    # One unit per axis: GPU-hours and USD are two charts. Idle capacity is not a model's use: it has
    # its own chart (idle against allocated), where it cannot dwarf the teams' bars.
    # A model with no GPU-hours (the CPU-only jobs' row, which has CPU and memory cost only) is no bar
    # of a GPU chart.
    used_models = sorted(m for m, f in by_model.items() if f.gpu_hours or f.gpu_cost)
    hours_by_model = {"GPU-hours": [float(by_model[m].gpu_hours) for m in used_models]}
    cost_by_model = {"GPU cost": [float(by_model[m].gpu_cost) for m in used_models]}
    figures = {
        "gpu_hours": stacked_over_time(
            times, series_over_steps(by_namespace, "gpu_hours", skip=(IDLE,)),
            title="GPU-hours per namespace", y_title="GPU-hours", bars=True,
        ),
        "cost": stacked_over_time(
            times, series_over_steps(by_namespace, "total_cost", skip=(IDLE,)),
            title="Cost per namespace (USD)", y_title="USD", bars=True,
        ),
        "models": by_category(used_models, hours_by_model, title="GPU-hours by GPU model", y_title="GPU-hours"),
        "models_cost": by_category(used_models, cost_by_model, title="GPU cost by GPU model", y_title="USD"),
        "efficiency": efficiency_bars(
            list(namespaces),
            [None if f.gpu_efficiency is None else f.gpu_efficiency * 100 for f in namespaces.values()],
            low=LOW_UTILIZATION_PCT, high=HIGH_UTILIZATION_PCT,
        ),
    }  # fmt: skip
    if IDLE in by_namespace.totals:
        allocated = [
            sum(float(f.gpu_hours) for n, f in groups.items() if n != IDLE) for _, _, groups in by_namespace.steps
        ]
        figures["idle"] = stacked_over_time(
            times,
            {"idle GPU-hours": series_over_steps(by_namespace, "gpu_hours")[IDLE], "allocated GPU-hours": allocated},
            title="Idle and allocated GPU capacity",
            y_title="GPU-hours",
        )
    return figures
