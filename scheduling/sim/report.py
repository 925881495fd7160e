"""Writers for the simulator's outputs: placements CSVs, ``summary.json`` and ``report.html``.

Pure formatting: everything here takes plain numbers/lists and writes files; no simulation.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

PLACEMENT_COLUMNS = ("seq", "pod", "node", "gpu_indices", "gpu_milli", "cpu_milli", "memory_mib")
REPLAY_EXTRA_COLUMNS = ("created_s", "started_s", "ended_s", "wait_s")

# Weng et al., ATC '23, default openb trace, unallocated GPU % at 100 % arrival, mean of 10 seeds.
PAPER_HEADLINE = {
    "random": 13.70,
    "dotprod": 9.38,
    "clustering": 8.35,
    "packing": 8.22,
    "bestfit": 7.14,
    "fgd": 4.77,
}

# The paper's workload variants (``scheduling.sim.variants``): published (FGD, BestFit) unallocated
# GPU % at 100 % arrival, mean over its seeds.
PAPER_VARIANT_HEADLINE = {
    "cpu050": (5.00, 6.44),
    "cpu100": (4.79, 6.74),
    "cpu200": (5.18, 7.85),
    "cpu250": (6.80, 8.79),
    "gpushare40": (6.04, 8.56),
    "gpushare60": (8.75, 10.94),
    "gpushare80": (10.92, 13.34),
    "gpushare100": (13.36, 15.38),
    "multigpu20": (4.47, 6.27),
    "multigpu30": (3.64, 5.43),
    "multigpu40": (3.09, 4.90),
    "multigpu50": (2.91, 4.38),
    "gpuspec10": (5.34, 6.90),
    "gpuspec20": (5.34, 11.54),
    "gpuspec25": (6.09, 14.33),
    "gpuspec33": (12.16, 19.61),
}


PAPER_NODE_LISTS = ("openb_node_list_gpu_node.csv", "openb_node_list_all_node.csv")
"""The paper's node list (only its GPU nodes are simulated, so the list with CPU-only nodes is the same)."""


def paper_trace(pods: str | Path, nodes: str | Path) -> str | None:
    """Which of the paper's traces the files are, by the published names: ``default`` or a variant
    (``gpuspec33``) when the pod list is ``openb_pod_list_<name>.csv`` and the node list openb's; None
    for any other trace, which the paper has no figure for."""
    pods_name, nodes_name = Path(pods).name, Path(nodes).name
    if nodes_name not in PAPER_NODE_LISTS or not pods_name.startswith("openb_pod_list_"):
        return None
    name = pods_name.removeprefix("openb_pod_list_").removesuffix(".csv")
    return name if name == "default" or name in PAPER_VARIANT_HEADLINE else None


def paper_headline(trace: str | None, policy: str) -> float | None:
    """The paper's published unallocated GPU % at 100 % arrival for ``policy`` on ``trace`` (a name of
    :func:`paper_trace`): every policy on ``default``, FGD and BestFit on a variant, else None."""
    published = PAPER_VARIANT_HEADLINE.get(trace or "")
    if published is not None:
        return published[0] if policy == "fgd" else published[1] if policy == "bestfit" else None
    return PAPER_HEADLINE.get(policy) if trace == "default" else None


def placements_path(out: Path, policy: str, seed: int) -> Path:
    return out / f"placements-{policy}-{seed}.csv"


def write_placements(path: Path, rows: Iterable[Sequence[Any]], *, replay: bool = False) -> None:
    """One row per arrived pod: ``node`` empty when it failed; ``gpu_indices`` joined by ``;``.

    ``gpu_milli`` is the share taken on each listed device (1000 for whole GPUs, 0 for CPU-only pods).
    """
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(PLACEMENT_COLUMNS + (REPLAY_EXTRA_COLUMNS if replay else ()))
        writer.writerows(rows)


def _clean(value: Any) -> Any:
    """JSON-safe: NaN/inf become null, numpy scalars become Python numbers."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if hasattr(value, "tolist"):
        return _clean(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_summary(path: Path, summary: dict[str, Any]) -> None:
    path.write_text(json.dumps(_clean(summary), indent=2) + "\n")


def _figure_html(fig: Any, first: bool) -> str:
    # The first chart carries plotly.js inline, so the report opens offline (no CDN).
    return fig.to_html(full_html=False, include_plotlyjs=first)


def write_arrival_report(path: Path, summary: dict[str, Any]) -> None:
    """Plotly charts: unallocated GPU % and fragmentation % vs arrived GPU %, per policy."""
    import plotly.graph_objects as go

    policies = summary["policies"]
    unalloc = go.Figure()
    frag = go.Figure()
    for name, p in policies.items():
        x = p["curve"]["arrival_pct"]
        unalloc.add_trace(go.Scatter(x=x, y=p["curve"]["unallocated_pct"], mode="lines", name=name))
        frag.add_trace(go.Scatter(x=x, y=p["fragmentation"]["curve_pct"], mode="lines", name=name))
    unalloc.update_layout(
        title="Unallocated GPU % vs arrived workload (mean over seeds)",
        xaxis_title="Arrived GPU request, % of cluster GPU capacity",
        yaxis_title="Unallocated GPU %",
    )
    frag.update_layout(
        title="GPU fragmentation (FGD's measure) vs arrived workload",
        xaxis_title="Arrived GPU request, % of cluster GPU capacity",
        yaxis_title="Fragmented GPU, % of capacity",
    )
    names = list(policies)
    bars = go.Figure(
        [
            go.Bar(
                name="this simulator",
                x=names,
                y=[policies[n]["headline"]["mean"] for n in names],
                error_y={"type": "data", "array": [policies[n]["headline"]["sd"] or 0 for n in names]},
            ),
            go.Bar(name="paper", x=names, y=[policies[n]["headline"].get("paper") for n in names]),
        ]
    )
    bars.update_layout(title="Unallocated GPU % at 100 % arrival", barmode="group")
    _write_html(path, "Arrival simulation", summary, [unalloc, frag, bars])


def write_replay_report(path: Path, summary: dict[str, Any]) -> None:
    """Plotly charts: GPU allocation and fragmentation over time, queueing-delay percentiles."""
    import plotly.graph_objects as go

    policies = summary["policies"]
    alloc = go.Figure()
    frag = go.Figure()
    delay = go.Figure()
    for name, p in policies.items():
        series = p["series"]
        alloc.add_trace(go.Scatter(x=series["time_s"], y=series["allocated_pct"], mode="lines", name=name))
        frag.add_trace(go.Scatter(x=series["time_s"], y=series["fragmentation_pct"], mode="lines", name=name))
        q = p["queue_delay_s"]
        delay.add_trace(go.Bar(name=name, x=["p50", "p90", "p99", "max"], y=[q["p50"], q["p90"], q["p99"], q["max"]]))
    alloc.update_layout(title="GPU allocation over time", xaxis_title="trace time (s)", yaxis_title="allocated GPU %")
    frag.update_layout(title="GPU fragmentation over time", xaxis_title="trace time (s)", yaxis_title="% of capacity")
    delay.update_layout(title="Queueing delay percentiles (s)", barmode="group")
    _write_html(path, "Replay simulation", summary, [alloc, frag, delay])


def _write_html(path: Path, title: str, summary: dict[str, Any], figures: list[Any]) -> None:
    rows = "".join(
        f"<tr><td>{name}</td><td>{_fmt(p.get('headline', {}).get('mean'))}</td>"
        f"<td>{_fmt(p.get('headline', {}).get('sd'))}</td><td>{_fmt(p.get('headline', {}).get('paper'))}</td>"
        f"<td>{_fmt(p.get('wall_s', {}).get('total'))}</td></tr>"
        for name, p in summary["policies"].items()
    )
    table = (
        "<table border=1 cellpadding=4><tr><th>policy</th><th>mean</th><th>SD</th><th>paper</th>"
        f"<th>wall s</th></tr>{rows}</table>"
        if summary.get("mode") == "arrival"
        else ""
    )
    body = "\n".join(_figure_html(fig, i == 0) for i, fig in enumerate(figures))
    path.write_text(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head><body>"
        f"<h1>{title}</h1><p>nodes: {summary.get('nodes')}<br>pods: {summary.get('pods')}<br>"
        f"seeds: {summary.get('seeds')}</p>{table}{body}</body></html>\n"
    )


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)
