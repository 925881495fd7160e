"""Simulator benchmark on the real openb trace (not a test: reads ../shared/traces).

Usage: ``.venv/bin/python bench/bench_sim.py [--repeat 3] [--jobs 2] [--seeds 42-51] [--out DIR]``

1. One FGD run of the default trace (seed 42; about 10,800 pods after resampling, 1,213 nodes),
   ``--repeat`` times; prints the median wall time. Target: under 5 s.
2. All six baselines plus ``portal`` over ``--seeds`` through the real command path
   (``scheduling.sim.cli.main``, placements CSVs skipped); prints wall time per policy and in total.
   Target: under 2 minutes.

The machine is shared, so wall times are medians and the CPU time is printed next to them.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one thread per process: the runs are parallelised by process

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scheduling.sim.arrival import inflate, run_arrival, typical_of  # noqa: E402
from scheduling.sim.cli import DEFAULT_NODES, DEFAULT_PODS, main  # noqa: E402
from scheduling.sim.trace import node_arrays, read_nodes, read_pods  # noqa: E402

ONE_RUN_TARGET_S = 5.0
SUITE_TARGET_S = 120.0


def bench_one_fgd(nodes_path: Path, pods_path: Path, repeat: int) -> float:
    nodes = node_arrays(read_nodes(nodes_path))
    pods = read_pods(pods_path)
    typical = typical_of(pods)
    walls, cpus = [], []
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        arrivals = inflate(pods, nodes.total_gpu_milli(), seed=42)
        run = run_arrival(nodes, arrivals, "fgd", seed=42, typical=typical)
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
    wall = statistics.median(walls)
    print(
        f"1. one FGD run: {len(arrivals)} pods, {len(nodes)} nodes, unallocated@100% {run.headline():.2f}; "
        f"wall median {wall:.2f} s of {[round(w, 2) for w in walls]} (cpu median {statistics.median(cpus):.2f} s) "
        f"-> {'OK' if wall < ONE_RUN_TARGET_S else 'OVER'} (target < {ONE_RUN_TARGET_S:.0f} s)"
    )
    return wall


def bench_suite(nodes_path: Path, pods_path: Path, seeds: str, jobs: int, out: Path) -> float:
    w0 = time.perf_counter()
    argv = ["--nodes", str(nodes_path), "--pods", str(pods_path), "--seeds", seeds, "--out", str(out)]
    main([*argv, "--jobs", str(jobs), "--no-placements", "--no-progress"])
    wall = time.perf_counter() - w0
    summary = json.loads((out / "summary.json").read_text())
    print(
        f"2. all policies x seeds {seeds} with {jobs} worker(s): wall {wall:.1f} s "
        f"-> {'OK' if wall < SUITE_TARGET_S else 'OVER'} (target < {SUITE_TARGET_S:.0f} s)"
    )
    print(f"   {'policy':<11} {'runs':>4} {'run wall median s':>18} {'sum of run walls s':>19}")
    for name, p in summary["policies"].items():
        runs = len(p["wall_s"]["per_seed"])
        print(f"   {name:<11} {runs:>4} {p['wall_s']['median']:>18.2f} {p['wall_s']['total']:>19.2f}")
    return wall


def main_bench(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default=str(ROOT / DEFAULT_NODES))
    parser.add_argument("--pods", default=str(ROOT / DEFAULT_PODS))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--out", default=None, help="keep the suite's outputs here (default: a temp dir)")
    parser.add_argument("--skip-suite", action="store_true")
    args = parser.parse_args(argv)
    nodes, pods = Path(args.nodes), Path(args.pods)
    if not nodes.exists() or not pods.exists():
        print(f"trace not found: {nodes} / {pods}", file=sys.stderr)
        return 2
    one = bench_one_fgd(nodes, pods, args.repeat)
    ok = one < ONE_RUN_TARGET_S
    if not args.skip_suite:
        if args.out:
            suite = bench_suite(nodes, pods, args.seeds, args.jobs, Path(args.out))
        else:
            with tempfile.TemporaryDirectory() as tmp:
                suite = bench_suite(nodes, pods, args.seeds, args.jobs, Path(tmp))
        ok = ok and suite < SUITE_TARGET_S
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main_bench())
