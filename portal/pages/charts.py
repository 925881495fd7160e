"""Plotly figures for the dashboard, built from plain data (no ORM here)."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

import plotly.graph_objects as go
import plotly.io as pio

from portal.chart_layout import chart_layout, time_axis

LAYOUT = chart_layout(380)


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
    fig.update_xaxes(**time_axis(times))
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
    """The figure as a ``div``: responsive (it takes its card's width and follows it; a fixed width
    would spill out of a narrow card), so no ``width`` is ever set in a layout."""
    fig.update_layout(autosize=True)
    return fig.to_html(
        full_html=False, include_plotlyjs=False, default_width="100%", config={"displaylogo": False, "responsive": True}
    )


def queue_history_figure(name: str, series: dict[str, dict[str, list]]) -> dict:
    """One ClusterQueue over time, per GPU model: GPUs in use and pending demand against the nominal
    quota. A figure as plain data (``figure_dict_html`` renders it without plotly's validation, which
    costs ~150 ms a figure: the Queues page draws one per queue)."""
    data: list[dict[str, object]] = []
    times: set[str] = set()
    for model, s in sorted(series.items()):
        at = [t.isoformat() for t in s["at"]]
        times.update(at)
        mode = "lines" if len(at) > 1 else "markers"  # one sample (a new portal) draws no line: a point
        data.append({"type": "scatter", "x": at, "y": s["used"], "name": f"{model} in use", "mode": mode})
        data.append({"type": "scatter", "x": at, "y": s["pending"], "name": f"{model} pending", "mode": mode,
                     "line": {"dash": "dot"}})  # fmt: skip
        data.append({"type": "scatter", "x": at, "y": s["nominal"], "name": f"{model} quota", "mode": mode,
                     "line": {"dash": "dash"}})  # fmt: skip
    layout = {
        "title": {"text": f"{name}: use and pending demand vs quota (hourly)"},
        "yaxis": {"title": {"text": "GPUs"}},
        "xaxis": time_axis(times),
    }
    return {"data": data, "layout": {**layout, **LAYOUT}}


def figure_dict_html(figure: dict) -> str:
    """A figure given as plain data, as HTML (plotly.js is on the page), without validating it."""
    return pio.to_html(figure, full_html=False, include_plotlyjs=False, validate=False,
                       config={"displaylogo": False})  # fmt: skip


def service_figure(name: str, samples: list[dict], *, target: float, metric: str) -> go.Figure:
    """An inference service over time: replicas running and desired (left axis) against the load
    divided by the target per replica (the replicas the load asks for, same axis) and the load itself."""
    at = [s["at"] for s in samples]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=at, y=[s["running"] for s in samples], name="replicas running", line_shape="hv"))
    desired = go.Scatter(x=at, y=[s["desired"] for s in samples], name="replicas desired", line_shape="hv")
    desired.line.dash = "dash"
    fig.add_trace(desired)
    asked = go.Scatter(x=at, y=[round(s["load"] / target, 3) for s in samples], name=f"load / target ({metric})")
    asked.line.dash = "dot"
    fig.add_trace(asked)
    fig.update_layout(title=f"{name}: replicas against load", yaxis_title="replicas", **LAYOUT)
    fig.update_xaxes(**time_axis(at))
    return fig
