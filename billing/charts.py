"""Plotly figures for the cost pages, built from plain data (no ORM, no Allocation objects here)."""

from __future__ import annotations

from datetime import datetime

import plotly.graph_objects as go

LAYOUT = {"margin": {"l": 55, "r": 20, "t": 40, "b": 40}, "height": 340, "legend": {"orientation": "h"}}


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
