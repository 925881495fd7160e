"""Markdown results table from simulator outputs: ``python -m scheduling.sim.table DIR [DIR ...]``.

Each ``DIR`` is an ``--out`` directory of an arrival-mode run (its ``summary.json``), named after its
trace (``default``, ``gpuspec33``, ...). The first table compares every policy of the first directory
with the paper; the second puts FGD and BestFit next to the paper's published means for each trace
and ``portal`` next to FGD: how much lower its mean is (relative) and on how many seeds it is lower.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scheduling.sim.report import PAPER_VARIANT_HEADLINE, paper_headline, paper_trace

NAMES = {
    "random": "Random",
    "dotprod": "DotProduct",
    "clustering": "GpuClustering",
    "packing": "GpuPacking",
    "bestfit": "BestFit",
    "fgd": "FGD",
    "portal": "portal (ours)",
}


def _load(path: Path) -> dict[str, Any]:
    return json.loads((path / "summary.json").read_text())


def _cell(p: dict[str, Any]) -> str:
    h = p["headline"]
    return f"{h['mean']:.2f} ± {h['sd']:.2f}" if h["mean"] is not None else "n/a"


def paper_table(summary: dict[str, Any]) -> str:
    seeds = summary["seeds"]
    title = (
        f"Unallocated GPU % at 100 % arrived GPU request, mean ± SD over seeds {seeds[0]}-{seeds[-1]} "
        f"({len(seeds)} seeds), `{Path(summary['pods']).name}` on `{Path(summary['nodes']).name}`:"
    )
    lines = [
        title,
        "",
        "| policy | ours | paper | ours − paper | failed pods | run wall s (median) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    trace = paper_trace(summary["pods"], summary["nodes"])
    for name, p in summary["policies"].items():
        paper = paper_headline(trace, name)
        mean = p["headline"]["mean"]
        diff = f"{mean - paper:+.2f}" if paper is not None and mean is not None else ""
        lines.append(
            f"| {NAMES.get(name, name)} | {_cell(p)} | {'' if paper is None else f'{paper:.2f}'} | {diff} "
            f"| {p['failed_pods']['mean']:.0f} | {p['wall_s']['median']:.2f} |"
        )
    return "\n".join(lines)


def _vs_paper(label: str, ps: dict[str, Any], policy: str) -> str:
    if policy not in ps:
        return ""
    mean, paper = ps[policy]["headline"]["mean"], paper_headline(label, policy)
    if paper is None or mean is None:
        return _cell(ps[policy])
    return f"{_cell(ps[policy])} ({paper:.2f}, {mean - paper:+.2f})"


def portal_vs_fgd(ps: dict[str, Any]) -> tuple[float, int, int] | None:
    """(portal's relative reduction of FGD's mean in %, seeds where portal is lower, seeds compared)."""
    if "fgd" not in ps or "portal" not in ps:
        return None
    fgd, portal = ps["fgd"]["headline"], ps["portal"]["headline"]
    if fgd["mean"] is None or portal["mean"] is None or fgd["mean"] <= 0:
        return None
    seeds = sorted(set(fgd["per_seed"]) & set(portal["per_seed"]))
    wins = sum(1 for k in seeds if portal["per_seed"][k] < fgd["per_seed"][k])
    return 100.0 * (fgd["mean"] - portal["mean"]) / fgd["mean"], wins, len(seeds)


def variants_table(summaries: Sequence[tuple[str, dict[str, Any]]]) -> str:
    head = "| trace | FGD (paper, ours − paper) | BestFit (paper, ours − paper) | portal (ours) | portal vs FGD"
    lines = [head + " | seeds portal < FGD |", "|---|---:|---:|---:|---:|---:|"]
    for label, s in summaries:
        ps = s["policies"]
        versus = portal_vs_fgd(ps)
        rel, wins = ("", "") if versus is None else (f"{-versus[0]:+.1f} %", f"{versus[1]}/{versus[2]}")
        portal = _cell(ps["portal"]) if "portal" in ps else ""
        lines.append(
            f"| {label} | {_vs_paper(label, ps, 'fgd')} | {_vs_paper(label, ps, 'bestfit')} | {portal} | {rel} "
            f"| {wins} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    dirs = [Path(a) for a in (sys.argv[1:] if argv is None else argv)]
    if not dirs:
        print(__doc__)
        return 2
    summaries = [(d.name, _load(d)) for d in dirs]
    if summaries[0][0] not in PAPER_VARIANT_HEADLINE:  # the paper's table is for its default trace
        print(paper_table(summaries[0][1]))
        print()
    print(variants_table(summaries))
    return 0


if __name__ == "__main__":
    sys.exit(main())
