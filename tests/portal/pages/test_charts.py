"""The pages load plotly.js's basic bundle (static/vendor/plotly/): it must be the plotly.js version the
Python package writes figures for, and hold every trace type the charts draw."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs_version

ROOT = Path(__file__).resolve().parents[3]
BUNDLE = ROOT / "static" / "vendor" / "plotly" / "plotly-basic.min.js"
BASIC_TRACES = {"Scatter", "Bar", "Pie"}  # what plotly.js's basic bundle registers
CHART_MODULES = [ROOT / "portal" / "pages" / "charts.py", ROOT / "billing" / "charts.py"]


def test_the_vendored_bundle_is_the_plotly_js_version_the_python_package_targets():
    header = BUNDLE.read_text()[:300]
    version = re.search(r"plotly\.js \(basic - minified\) v(\S+)", header)
    assert version is not None
    assert version.group(1) == get_plotlyjs_version()
    assert (BUNDLE.parent / "LICENSE").read_text().startswith("MIT License")


def test_the_charts_draw_only_trace_types_of_the_basic_bundle():
    used = set()
    for module in CHART_MODULES:
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "go":
                if isinstance(getattr(go, node.attr, None), type) and issubclass(getattr(go, node.attr), go.Figure):
                    continue
                used.add(node.attr)
    traces = {name for name in used if name not in {"Figure", "Layout"}}
    assert traces
    assert traces <= BASIC_TRACES, traces - BASIC_TRACES


def test_a_queue_chart_of_one_sample_draws_points_not_an_empty_line():
    from datetime import UTC, datetime, timedelta

    from portal.pages.charts import queue_history_figure

    t = datetime(2026, 11, 29, 20, 0, tzinfo=UTC)
    one = {"at": [t], "used": [1.0], "pending": [0.0], "nominal": [8.0]}
    two = {"at": [t, t + timedelta(hours=1)], "used": [1.0, 2.0], "pending": [0.0, 0.0], "nominal": [8.0, 8.0]}
    assert {d["mode"] for d in queue_history_figure("cq", {"A100-80GB": one})["data"]} == {"markers"}
    assert {d["mode"] for d in queue_history_figure("cq", {"A100-80GB": two})["data"]} == {"lines"}
