"""Markdown results table from simulator outputs: ``python -m scheduling.sim.table DIR [DIR ...]``.

Each ``DIR`` is an ``--out`` directory of an arrival-mode run (its ``summary.json``). The first table
compares every policy of the first directory with the paper; the second puts FGD next to ``portal``
(and any other policies present) for every directory, e.g. the workload variants.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scheduling.sim.report import PAPER_HEADLINE

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
    for name, p in summary["policies"].items():
        paper = PAPER_HEADLINE.get(name)
        mean = p["headline"]["mean"]
        diff = f"{mean - paper:+.2f}" if paper is not None and mean is not None else ""
        lines.append(
            f"| {NAMES.get(name, name)} | {_cell(p)} | {'' if paper is None else f'{paper:.2f}'} | {diff} "
            f"| {p['failed_pods']['mean']:.0f} | {p['wall_s']['median']:.2f} |"
        )
    return "\n".join(lines)


def variants_table(summaries: Sequence[tuple[str, dict[str, Any]]]) -> str:
    policies: list[str] = []
    for _, s in summaries:
        policies += [p for p in s["policies"] if p not in policies]
    head = "| trace | " + " | ".join(NAMES.get(p, p) for p in policies) + " | portal − FGD |"
    lines = [head, "|---|" + "---:|" * (len(policies) + 1)]
    for label, s in summaries:
        ps = s["policies"]
        cells = [_cell(ps[p]) if p in ps else "" for p in policies]
        delta = ""
        fgd, portal = (ps[p]["headline"]["mean"] if p in ps else None for p in ("fgd", "portal"))
        if fgd is not None and portal is not None:
            delta = f"{portal - fgd:+.2f}"
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {delta} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    dirs = [Path(a) for a in (sys.argv[1:] if argv is None else argv)]
    if not dirs:
        print(__doc__)
        return 2
    summaries = [(d.name, _load(d)) for d in dirs]
    print(paper_table(summaries[0][1]))
    if len(summaries) > 1:
        print()
        print(variants_table(summaries))
    return 0


if __name__ == "__main__":
    sys.exit(main())
