"""Plotly figures for the what-if result: what happened next to the replay under the change, per team.

One quantity per chart (never two units on one axis). Built from the stored result (plain data).
"""

from __future__ import annotations

import plotly.graph_objects as go

from portal.chart_layout import chart_layout

LAYOUT = chart_layout(320)
RECORDED, WHATIF = "#8a94a6", "#2f6fde"


def _bars(teams: list[str], series: list[tuple[str, list[float | None], str]], *, title: str, y: str) -> go.Figure:
    fig = go.Figure()
    for name, values, color in series:
        fig.add_trace(go.Bar(x=teams, y=values, name=name, marker_color=color))
    fig.update_layout(title=title, yaxis_title=y, barmode="group", autosize=True, **LAYOUT)
    return fig


def _minutes(value: float | None) -> float | None:
    return None if value is None else round(value / 60, 1)


def comparison_figures(result: dict, teams: list[str]) -> dict[str, go.Figure]:
    """Waits (P50 and P90, minutes), GPU-hours, utilization of nominal quota and cost, per team."""
    recorded, whatif = result["recorded"], result["whatif"]

    def values(side: dict, key: str, convert=lambda v: v) -> list[float | None]:
        return [convert(side[t][key]) for t in teams]

    return {
        "waits": _bars(
            teams,
            [
                ("P50 recorded", values(recorded, "wait_p50_s", _minutes), "#b8c0cc"),
                ("P50 what-if", values(whatif, "wait_p50_s", _minutes), "#8fb3f0"),
                ("P90 recorded", values(recorded, "wait_p90_s", _minutes), RECORDED),
                ("P90 what-if", values(whatif, "wait_p90_s", _minutes), WHATIF),
            ],
            title="Wait before admission",
            y="minutes",
        ),
        "gpu_hours": _bars(
            teams,
            [("recorded", values(recorded, "gpu_hours"), RECORDED), ("what-if", values(whatif, "gpu_hours"), WHATIF)],
            title="GPU-hours",
            y="GPU-hours",
        ),
        "utilization": _bars(
            teams,
            [
                ("recorded", values(recorded, "utilization_pct"), RECORDED),
                ("what-if", values(whatif, "utilization_pct"), WHATIF),
            ],
            title="Use of nominal quota",
            y="%",
        ),
        "cost": _bars(
            teams,
            [
                ("recorded", values(recorded, "cost_usd", float), RECORDED),
                ("what-if", values(whatif, "cost_usd", float), WHATIF),
            ],
            title="GPU cost",
            y="USD",
        ),
    }
