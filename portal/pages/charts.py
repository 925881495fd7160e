"""Plotly figures for the dashboard, built from plain data (no ORM here)."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

import plotly.graph_objects as go

LAYOUT = {"margin": {"l": 50, "r": 20, "t": 40, "b": 40}, "height": 340, "legend": {"orientation": "h"}}


def allocation_series(
    intervals: list[tuple[datetime, datetime, str, float]],
    *,
    start: datetime,
    end: datetime,
    points: int = 240,
) -> tuple[list[datetime], dict[str, list[float]]]:
    """GPUs allocated per GPU model at ``points`` evenly spaced instants (a sweep over interval edges).

    ``intervals`` are (start, end, gpu_model, gpus); an interval counts at instant t when start <= t < end.
    """
    step = (end - start) / max(points - 1, 1)
    times = [start + step * i for i in range(points)]
    edges: dict[str, list[tuple[datetime, float]]] = defaultdict(list)
    for begin, finish, model, gpus in intervals:
        edges[model].append((begin, gpus))
        edges[model].append((finish, -gpus))
    series: dict[str, list[float]] = {}
    for model, model_edges in sorted(edges.items()):
        model_edges.sort(key=lambda e: e[0])
        level, index, values = 0.0, 0, []
        for t in times:
            while index < len(model_edges) and model_edges[index][0] <= t:
                level += model_edges[index][1]
                index += 1
            values.append(round(level, 6))
        series[model] = values
    return times, series


def allocation_figure(times: list[datetime], series: dict[str, list[float]], capacity: int) -> go.Figure:
    fig = go.Figure()
    for model, values in series.items():
        fig.add_trace(go.Scatter(x=times, y=values, name=model, stackgroup="gpus", mode="lines", line_shape="hv"))
    if times:
        fig.add_trace(
            go.Scatter(
                x=[times[0], times[-1]], y=[capacity, capacity], name="capacity", mode="lines",
                line={"dash": "dash", "color": "#888"},
            )
        )  # fmt: skip
    fig.update_layout(title="Cluster GPU allocation (GPUs, stacked by model)", yaxis_title="GPUs", **LAYOUT)
    return fig


def gpu_hours_figure(by_team_day: dict[str, dict[str, float]], *, days: list[str]) -> go.Figure:
    fig = go.Figure()
    for team, per_day in sorted(by_team_day.items()):
        fig.add_trace(go.Bar(x=days, y=[round(per_day.get(d, 0.0), 3) for d in days], name=team))
    fig.update_layout(barmode="stack", title="GPU-hours per team per day", yaxis_title="GPU-hours", **LAYOUT)
    return fig


def day_labels(now: datetime, days: int) -> list[str]:
    return [(now - timedelta(days=days - 1 - i)).date().isoformat() for i in range(days)]


def figure_html(fig: go.Figure) -> str:
    return fig.to_html(full_html=False, include_plotlyjs=False, config={"displaylogo": False})
