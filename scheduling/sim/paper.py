"""The paper's whole evaluation in one command: the default trace and its 16 variants.

    python -m scheduling.sim.paper --out out/paper [--seeds 42-51] [--jobs 2]
                                   [--policy fgd --policy bestfit --policy portal] [TRACE ...]

Steps:

1. Write the 16 variants of ``--pods`` (``scheduling.sim.variants``, ``--variant-seed``) to
   ``OUT/variants``.
2. Run the arrival-mode simulation of each trace (``default`` = ``--pods`` itself, then the variants,
   or only the ``TRACE`` names given) with the policies and seeds, into ``OUT/<trace>`` (no
   placements CSVs).
3. Print the tables of ``scheduling.sim.table``: the default trace against the paper, then every trace
   with FGD and BestFit against the paper's published means and ``portal`` against FGD (relative
   difference and seeds won).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from scheduling.sim import cli, table, variants

DEFAULT_POLICIES = ("fgd", "bestfit", "portal")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scheduling.sim.paper", description=__doc__.splitlines()[0])
    parser.add_argument("--pods", default=cli.DEFAULT_PODS)
    parser.add_argument("--nodes", default=cli.DEFAULT_NODES)
    parser.add_argument("--out", required=True)
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--variant-seed", type=int, default=0)
    parser.add_argument("--policy", action="append", help=f"repeatable; default: {', '.join(DEFAULT_POLICIES)}")
    parser.add_argument("--scarcity", action="store_true", help="the simulator's scarcity experiment (see cli)")
    parser.add_argument("traces", nargs="*", help="default and/or variant names; default: all 17")
    args = parser.parse_args(argv)
    traces = args.traces or ["default", *variants.PAPER_VARIANTS]
    unknown = sorted(set(traces) - {"default", *variants.PAPER_VARIANTS})
    if unknown:
        parser.error(f"unknown traces {', '.join(unknown)}; choose from default, {', '.join(variants.PAPER_VARIANTS)}")
    out = Path(args.out)
    # 1. The variants.
    wanted = [t for t in traces if t != "default"]
    if wanted:
        variants.main(
            [
                "--pods",
                args.pods,
                "--nodes",
                args.nodes,
                "--out",
                str(out / "variants"),
                "--seed",
                str(args.variant_seed),
                *wanted,
            ]
        )
    # 2. One simulation per trace.
    policies = [arg for name in (args.policy or DEFAULT_POLICIES) for arg in ("--policy", name)]
    for trace in traces:
        pods = args.pods if trace == "default" else str(out / "variants" / f"openb_pod_list_{trace}.csv")
        common = ["--nodes", args.nodes, "--pods", pods, "--seeds", args.seeds, "--jobs", str(args.jobs)]
        extra = ["--scarcity"] if args.scarcity else []
        cli.main([*common, *policies, *extra, "--out", str(out / trace), "--no-placements", "--no-progress"])
    # 3. The tables.
    return table.main([str(out / trace) for trace in traces])


if __name__ == "__main__":
    sys.exit(main())
