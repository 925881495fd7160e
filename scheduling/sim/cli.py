"""Command line of the trace simulator: ``python -m scheduling.sim`` / ``manage.py simulate``.

``main(argv)`` parses arguments, runs every (policy, seed) pair, writes ``summary.json``,
``placements-<policy>-<seed>.csv`` and ``report.html`` into ``--out``, and prints a table with the
wall time per policy. See docs/simulator.md.
"""

from __future__ import annotations

import argparse
import multiprocessing
import re
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from scheduling.engine.frag import POLICIES, NodeArrays, TypicalPod
from scheduling.sim import report
from scheduling.sim.arrival import CURVE_MAX_PCT, DEFAULT_RATIO, inflate, run_arrival, typical_of, workload_of
from scheduling.sim.replay import downsample, run_replay
from scheduling.sim.trace import TracePod, node_arrays, read_nodes, read_pods

DEFAULT_POLICY = "portal"  # our own fragmentation-aware policy
ALIASES = {"default": DEFAULT_POLICY, "dotproduct": "dotprod", "gpuclustering": "clustering", "gpupacking": "packing"}
DEFAULT_NODES = "../shared/traces/alibaba-openb/openb_node_list_gpu_node.csv"
DEFAULT_PODS = "../shared/traces/alibaba-openb/openb_pod_list_default.csv"


def parse_seeds(text: str) -> list[int]:
    """``42-51`` (inclusive range), ``42,43,50`` or a mix of both."""
    seeds: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        match = re.fullmatch(r"(\d+)\s*-\s*(\d+)|(\d+)", part)
        if match is None:
            raise argparse.ArgumentTypeError(f"bad seed {part!r}; use e.g. 42-51 or 42,43")
        if match.group(3) is not None:
            seeds.append(int(match.group(3)))
            continue
        a, b = int(match.group(1)), int(match.group(2))
        if b < a:
            raise argparse.ArgumentTypeError(f"empty seed range {part!r}")
        seeds.extend(range(a, b + 1))
    if not seeds:
        raise argparse.ArgumentTypeError("no seeds given")
    return seeds


def parse_policy(name: str) -> str:
    key = ALIASES.get(name.lower(), name.lower())
    if key not in POLICIES:
        raise argparse.ArgumentTypeError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)} or default")
    return key


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="simulate",
        description="Replay a GPU cluster trace through the placement policies (FGD paper protocol).",
    )
    parser.add_argument("--nodes", default=DEFAULT_NODES, help="node list CSV (sn,cpu_milli,memory_mib,gpu,model)")
    parser.add_argument("--pods", default=DEFAULT_PODS, help="pod list CSV (openb format)")
    parser.add_argument(
        "--policy",
        action="append",
        type=parse_policy,
        help=f"repeatable; one of {', '.join(POLICIES)}, default (= {DEFAULT_POLICY}); default: all",
    )
    parser.add_argument("--seeds", type=parse_seeds, default=parse_seeds("42-51"), help="e.g. 42-51 or 42,43")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--mode", choices=("arrival", "replay"), default="arrival")
    parser.add_argument("--ratio", type=float, default=DEFAULT_RATIO, help="arrival mode: inflate to this x capacity")
    parser.add_argument(
        "--compress", type=float, default=1.0, help="replay mode: divide arrival times by this (more load)"
    )
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (runs are independent)")
    parser.add_argument("--no-placements", action="store_true", help="skip the per-run placements CSVs")
    parser.add_argument(
        "--scarcity",
        action="store_true",
        help="portal also keeps the last room for scarce shapes of the whole workload (an experiment: the live "
        "engine does not, so without this flag the simulator's portal is the live one)",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return parser


# Worker state, set once per process (fork) so jobs only carry (policy, seed).
_STATE: dict[str, Any] = {}


def _init_state(
    nodes: NodeArrays,
    names: list[str],
    pods: list[TracePod],
    typical: tuple[TypicalPod, ...],
    workload: tuple[TypicalPod, ...],
    out: Path,
    ratio: float,
    placements: bool,
    compress: float = 1.0,
) -> None:
    _STATE.update(
        nodes=nodes,
        names=names,
        pods=pods,
        typical=typical,
        workload=workload,
        out=out,
        ratio=ratio,
        placements=placements,
        compress=compress,
    )


def _arrival_job(policy: str, seed: int, progress: Any = None) -> dict[str, Any]:
    st = _STATE
    nodes: NodeArrays = st["nodes"]
    arrivals = inflate(st["pods"], nodes.total_gpu_milli(), seed=seed, ratio=st["ratio"])
    tick = _ticker(progress)
    run = run_arrival(
        nodes,
        arrivals,
        policy,
        seed=seed,
        typical=st["typical"],
        workload=st["workload"],
        on_pod=tick,
    )
    if st["placements"]:
        names = st["names"]
        rows = (
            (
                a.seq,
                a.name,
                names[run.node[a.seq]] if run.node[a.seq] >= 0 else "",
                ";".join(str(i) for i in run.gpu_indices[a.seq]),
                a.pod.gpu_milli,
                a.pod.cpu_milli,
                a.pod.memory_mib,
            )
            for a in arrivals
        )
        report.write_placements(report.placements_path(st["out"], policy, seed), rows)
    failed = run.node < 0
    at100 = run.arrived_pct <= 100.0
    return {
        "policy": policy,
        "seed": seed,
        "pods": len(arrivals),
        "headline": run.headline(),
        "curve": run.curve(),
        "frag_curve": run.frag_curve(),
        "failed": int(failed.sum()),
        "failed_by_100": int((failed & at100).sum()),
        "failed_gpu_milli": int(sum(a.pod.total_gpu_milli for a, f in zip(arrivals, failed, strict=True) if f)),
        "wall_s": run.wall_s,
    }


def _ticker(progress: Any, every: int = 512) -> Any:
    if progress is None:
        return None
    count = [0]

    def tick() -> None:
        count[0] += 1
        if count[0] == every:
            progress.update(every)
            count[0] = 0

    return tick


def _replay_job(policy: str, seed: int, progress: Any = None) -> dict[str, Any]:
    st = _STATE
    nodes: NodeArrays = st["nodes"]
    pods: list[TracePod] = st["pods"]
    run = run_replay(
        nodes,
        pods,
        policy,
        seed=seed,
        typical=st["typical"],
        workload=st["workload"],
        compress=st["compress"],
        on_event=_ticker(progress),
    )
    if st["placements"]:
        names = st["names"]
        order = np.argsort([p.creation_time_s for p in pods], kind="stable")
        rows = []
        for seq, i in enumerate(order):
            c, p = run.choice[i], pods[i]
            started = run.started_s[i]
            rows.append(
                (
                    seq,
                    p.name,
                    names[c.node] if c is not None else "",
                    ";".join(str(d) for d in c.gpu_indices) if c is not None else "",
                    p.gpu_milli,
                    p.cpu_milli,
                    p.memory_mib,
                    run.created_s[i],
                    "" if np.isnan(started) else started,
                    "" if np.isnan(run.ended_s[i]) else run.ended_s[i],
                    "" if np.isnan(started) else started - run.created_s[i],
                )
            )
        report.write_placements(report.placements_path(st["out"], policy, seed), rows, replay=True)
    cap = run.capacity_gpu_milli
    t, alloc, frag, queued = downsample(
        run.time_s, 100.0 * run.allocated_milli / cap, 100.0 * run.frag_milli / cap, run.queued.astype(float)
    )
    mean_alloc = _window_mean(run.time_s, run.allocated_milli / cap * 100.0, run.created_s)
    mean_frag = _window_mean(run.time_s, run.frag_milli / cap * 100.0, run.created_s)
    return {
        "policy": policy,
        "seed": seed,
        "pods": len(pods),
        "delay": run.delay_percentiles(),
        "series": {"time_s": t, "allocated_pct": alloc, "fragmentation_pct": frag, "queued": queued},
        "mean_allocated_pct": mean_alloc,
        "peak_allocated_pct": float(run.allocated_milli.max() / cap * 100.0) if run.allocated_milli.size else 0.0,
        "mean_fragmentation_pct": mean_frag,
        "wall_s": run.wall_s,
    }


def _window_mean(time_s: np.ndarray, values: np.ndarray, created_s: np.ndarray) -> float:
    """Time-weighted mean of a step series between the first and the last arrival."""
    if time_s.size < 2 or created_s.size == 0:
        return float(values[-1]) if values.size else 0.0
    lo, hi = float(created_s.min()), float(created_s.max())
    if hi <= lo:
        return float(values[0])
    edges = np.clip(np.append(time_s, np.inf), lo, hi)
    weights = np.diff(edges)
    return float(np.sum(weights * values) / (hi - lo))


def _pool_job(args: tuple[str, str, int]) -> dict[str, Any]:
    mode, policy, seed = args
    return (_arrival_job if mode == "arrival" else _replay_job)(policy, seed)


def _stats(values: Sequence[float]) -> dict[str, Any]:
    arr = np.asarray(values, dtype=np.float64)
    return {
        "mean": float(arr.mean()) if arr.size else None,
        "sd": float(arr.std(ddof=1)) if arr.size > 1 else 0.0,
    }


def _summarise_arrival(
    results: list[dict[str, Any]], policies: list[str], seeds: list[int], trace: str | None = None
) -> dict[str, Any]:
    """Per policy over the seeds; ``trace``: the paper's name of the trace (``report.paper_trace``), whose
    published figure is shown beside each policy's (none for a trace the paper did not publish)."""
    out: dict[str, Any] = {}
    x = list(range(CURVE_MAX_PCT + 1))
    for policy in policies:
        rs = sorted((r for r in results if r["policy"] == policy), key=lambda r: r["seed"])
        curves = np.array([r["curve"] for r in rs])
        frags = np.array([r["frag_curve"] for r in rs])
        with warnings.catch_warnings():  # buckets no seed reached stay NaN
            warnings.simplefilter("ignore", RuntimeWarning)
            curve_mean = np.nanmean(curves, axis=0) if len(rs) else np.full(len(x), np.nan)
            frag_mean = np.nanmean(frags, axis=0) if len(rs) else np.full(len(x), np.nan)
        head = [r["headline"] for r in rs]
        out[policy] = {
            "headline": {
                **_stats(head),
                "per_seed": {r["seed"]: r["headline"] for r in rs},
                "paper": report.paper_headline(trace, policy),
                "metric": "unallocated GPU % at 100 % arrived GPU request",
            },
            "curve": {"arrival_pct": x, "unallocated_pct": curve_mean, "per_seed": {r["seed"]: r["curve"] for r in rs}},
            "failed_pods": {
                **_stats([r["failed"] for r in rs]),
                "per_seed": {r["seed"]: r["failed"] for r in rs},
                "by_100_pct_arrival_mean": float(np.mean([r["failed_by_100"] for r in rs])) if rs else None,
                "gpu_milli_mean": float(np.mean([r["failed_gpu_milli"] for r in rs])) if rs else None,
            },
            "fragmentation": {
                "metric": "FGD fragmentation (typical pods of the input trace), % of GPU capacity",
                "at_100_pct": _stats([r["frag_curve"][100] for r in rs]),
                "curve_pct": frag_mean,
            },
            "pods_per_run": {r["seed"]: r["pods"] for r in rs},
            "wall_s": {
                "total": float(sum(r["wall_s"] for r in rs)),
                "median": float(np.median([r["wall_s"] for r in rs])) if rs else None,
                "per_seed": {r["seed"]: r["wall_s"] for r in rs},
            },
        }
    return out


def _summarise_replay(results: list[dict[str, Any]], policies: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for policy in policies:
        rs = sorted((r for r in results if r["policy"] == policy), key=lambda r: r["seed"])
        first = rs[0]
        keys = ("p50", "p90", "p99", "max", "mean", "never_started")
        delay = {k: _mean_or_none([r["delay"][k] for r in rs]) for k in keys}
        out[policy] = {
            "queue_delay_s": {**delay, "per_seed": {r["seed"]: r["delay"] for r in rs}},
            "mean_allocated_pct": {
                **_stats([r["mean_allocated_pct"] for r in rs]),
                "window": "first to last arrival, time-weighted",
            },
            "peak_allocated_pct": _stats([r["peak_allocated_pct"] for r in rs]),
            "fragmentation": {"mean_pct": _stats([r["mean_fragmentation_pct"] for r in rs])},
            "series": {**first["series"], "seed": first["seed"]},
            "wall_s": {
                "total": float(sum(r["wall_s"] for r in rs)),
                "median": float(np.median([r["wall_s"] for r in rs])),
                "per_seed": {r["seed"]: r["wall_s"] for r in rs},
            },
        }
    return out


def _mean_or_none(values: list[Any]) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.mean(vals)) if vals else None


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    policies: list[str] = list(dict.fromkeys(args.policy or POLICIES))
    seeds: list[int] = list(dict.fromkeys(args.seeds))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    trace_nodes = [n for n in read_nodes(args.nodes) if n.gpu_count > 0]  # only GPU nodes are simulated
    pods = read_pods(args.pods)
    nodes = node_arrays(trace_nodes)
    if nodes.total_gpu_milli() == 0:
        print("error: the node list has no GPU nodes", file=sys.stderr)
        return 2
    # FGD's target workload, from the original pod list; portal plans for the same table.
    names = [n.name for n in trace_nodes]
    _init_state(
        nodes,
        names,
        pods,
        typical_of(pods),
        workload_of(pods) if args.scarcity else (),
        out,
        args.ratio,
        not args.no_placements,
        args.compress,
    )
    jobs = [(args.mode, p, s) for p in policies for s in seeds]
    total, unit = _progress_total(args, jobs, pods, nodes)
    started = time.perf_counter()
    results = _run_all(args, jobs, total, unit)
    wall = time.perf_counter() - started

    summary: dict[str, Any] = {
        "mode": args.mode,
        "nodes": str(args.nodes),
        "pods": str(args.pods),
        "gpu_nodes": len(trace_nodes),
        "capacity_gpu_milli": nodes.total_gpu_milli(),
        "trace_pods": len(pods),
        "seeds": seeds,
        "default_policy": DEFAULT_POLICY,
        "compress": args.compress if args.mode == "replay" else None,
        "wall_s": wall,
    }
    _write_outputs(args, summary, results, policies, seeds, out)
    print(f"wrote {out / 'summary.json'}, {out / 'report.html'} ({wall:.1f} s wall)")
    return 0


def _progress_total(
    args: argparse.Namespace, jobs: list[tuple[str, str, int]], pods: list[TracePod], nodes: NodeArrays
) -> tuple[int, str]:
    """What the progress bar counts: arrived pods (arrival mode) or events (replay)."""
    if args.mode == "arrival":
        seeds = {s for _, _, s in jobs}
        per_run = {s: len(inflate(pods, nodes.total_gpu_milli(), seed=s, ratio=args.ratio)) for s in seeds}
        return sum(per_run[s] for _, _, s in jobs), "pod"
    return len(jobs) * len(pods) * 2, "event"


def _run_all(args: argparse.Namespace, jobs: list[tuple[str, str, int]], total: int, unit: str) -> list[dict[str, Any]]:
    """Every (mode, policy, seed) run, in worker processes with ``--jobs`` > 1, with a progress bar."""
    results: list[dict[str, Any]] = []
    with tqdm(total=total, unit=unit, disable=args.no_progress, desc=args.mode, smoothing=0.05) as bar:
        if args.jobs > 1 and len(jobs) > 1:
            ctx = multiprocessing.get_context("fork")
            with ctx.Pool(min(args.jobs, len(jobs))) as pool:
                for r in pool.imap_unordered(_pool_job, jobs):
                    results.append(r)
                    bar.update(r["pods"] if args.mode == "arrival" else 2 * r["pods"])
                    bar.set_postfix_str(f"{r['policy']}/{r['seed']}")
        else:
            for mode, policy, seed in jobs:
                bar.set_postfix_str(f"{policy}/{seed}")
                job = _arrival_job if mode == "arrival" else _replay_job
                before = bar.n
                r = job(policy, seed, bar)
                expected = r["pods"] if mode == "arrival" else 2 * r["pods"]
                bar.update(max(0, before + expected - bar.n))
                results.append(r)
    return results


def _write_outputs(
    args: argparse.Namespace,
    summary: dict[str, Any],
    results: list[dict[str, Any]],
    policies: list[str],
    seeds: list[int],
    out: Path,
) -> None:
    if args.mode == "arrival":
        summary["ratio"] = args.ratio
        trace = report.paper_trace(args.pods, args.nodes)
        summary["paper_trace"] = trace
        summary["policies"] = _summarise_arrival(results, policies, seeds, trace)
        report.write_summary(out / "summary.json", summary)
        report.write_arrival_report(out / "report.html", summary)
        _print_arrival(summary)
    else:
        summary["policies"] = _summarise_replay(results, policies)
        report.write_summary(out / "summary.json", summary)
        report.write_replay_report(out / "report.html", summary)
        _print_replay(summary)


def _print_arrival(summary: dict[str, Any]) -> None:
    print(f"{'policy':<11} {'unalloc@100%':>13} {'SD':>6} {'paper':>6} {'failed':>8} {'wall s':>8} {'med/run':>8}")
    for name, p in summary["policies"].items():
        h = p["headline"]
        paper = "" if h["paper"] is None else f"{h['paper']:.2f}"
        print(
            f"{name:<11} {h['mean']:>13.2f} {h['sd']:>6.2f} {paper:>6} {p['failed_pods']['mean']:>8.1f} "
            f"{p['wall_s']['total']:>8.2f} {p['wall_s']['median']:>8.2f}"
        )


def _print_replay(summary: dict[str, Any]) -> None:
    print(f"{'policy':<11} {'alloc%':>7} {'p50 s':>9} {'p90 s':>9} {'p99 s':>10} {'queued@end':>10} {'wall s':>8}")
    for name, p in summary["policies"].items():
        q = p["queue_delay_s"]
        print(
            f"{name:<11} {p['mean_allocated_pct']['mean']:>7.2f} {_f(q['p50']):>9} {_f(q['p90']):>9} "
            f"{_f(q['p99']):>10} {_f(q['never_started']):>10} {p['wall_s']['total']:>8.2f}"
        )


def _f(v: Any) -> str:
    return "" if v is None else f"{v:.0f}"
