"""Plotly figures for the dashboard, built from plain data (no ORM here)."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

import plotly.graph_objects as go

LAYOUT = {
    "margin": {"l": 50, "r": 20, "t": 50, "b": 40},
    "height": 380,
    "legend": {"orientation": "h", "y": -0.18, "yanchor": "top", "x": 0, "xanchor": "left"},
}


def allocation_series(
    intervals: list[tuple[datetime, datetime, str, float]], *, start: datetime, end: datetime, buckets: int = 168
) -> tuple[list[datetime], dict[str, list[float]]]:
    """Average GPUs allocated per GPU model in each of ``buckets`` equal time buckets of [start, end).

    ``intervals`` are (start, end, gpu_model, gpus). Each bucket's value is the GPU-seconds that fall in
    it divided by its length, so a job shorter than a bucket still counts (sampling at instants would
    miss it) and the area under the curve equals the metered GPU-hours.
    """
    span_s = (end - start).total_seconds()
    width_s = span_s / buckets
    times = [start + timedelta(seconds=width_s * i) for i in range(buckets)]
    series: dict[str, list[float]] = defaultdict(lambda: [0.0] * buckets)
    for begin, finish, model, gpus in intervals:
        lo = max((begin - start).total_seconds(), 0.0)
        hi = min((finish - start).total_seconds(), span_s)
        if hi <= lo:
            continue
        values = series[model]
        for bucket in range(int(lo // width_s), min(int(hi // width_s), buckets - 1) + 1):
            b_lo, b_hi = bucket * width_s, (bucket + 1) * width_s
            overlap = min(hi, b_hi) - max(lo, b_lo)
            if overlap > 0:
                values[bucket] += gpus * overlap / width_s
    return times, {model: [round(v, 6) for v in values] for model, values in sorted(series.items())}


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
    fig.update_layout(title="Cluster GPU allocation (average GPUs per bucket, by model)", yaxis_title="GPUs", **LAYOUT)
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


def queue_history_figure(name: str, series: dict[str, dict[str, list]]) -> go.Figure:
    """One ClusterQueue over time, per GPU model: GPUs in use and pending demand against the nominal quota."""
    fig = go.Figure()
    for model, s in sorted(series.items()):
        fig.add_trace(go.Scatter(x=s["at"], y=s["used"], name=f"{model} in use", mode="lines"))
        pending = go.Scatter(x=s["at"], y=s["pending"], name=f"{model} pending", mode="lines", line={"dash": "dot"})
        fig.add_trace(pending)
        fig.add_trace(go.Scatter(x=s["at"], y=s["nominal"], name=f"{model} quota", mode="lines", line={"dash": "dash"}))
    fig.update_layout(title=f"{name}: use and pending demand vs quota (hourly means)", yaxis_title="GPUs", **LAYOUT)
    return fig
