"""Benchmark the dry run beside a full cycle, on bench_cycle's world (10,000 pending jobs, 5,000 nodes).

    .venv/bin/python bench/bench_dryrun.py [--nodes 5000] [--jobs 10000] [--checks 200] [--burst 50] [--seed 1]

A dry run reuses the last cycle's state (``scheduling.engine.dryrun.DryRun``: the cycle runs once, then
each check is one decision on its final state plus, for a job that would wait, the forecast run up to
its start, replayed from the cycle's recorded forecast). Prints the full cycle's CPU time (``run_cycle``,
forecast included) and the P50/P95/max CPU time of ``--checks`` dry runs of jobs drawn like the world's
pending ones, with how many run now, wait or never fit, and of each check with its suggestions (what
the endpoint asks the engine). The first checks include copying the state for the replay's cursors.
Target: P95 ≤ 100 ms. Then ``--burst`` submissions between two cycles: each check counts the jobs
submitted before it (decided first on a copy of the state; a waiting one's start from a forecast run),
in order, then as from 4 clients at once (committing out of their creation order).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_cycle import build
from scheduling.engine.cycle import run_cycle
from scheduling.engine.dryrun import DryRun
from scheduling.engine.model import Policy, WorkloadState

NOW = 5000.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--queues", type=int, default=100)
    parser.add_argument("--checks", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--burst", type=int, default=50, help="submissions in the burst after the checks")
    args = parser.parse_args()

    snapshot = build(args.nodes, args.jobs, args.queues, 0.5, args.seed)
    policy = Policy(seed=args.seed)
    pending = [w for w in snapshot.workloads if w.state == WorkloadState.PENDING]
    print(
        f"world: {len(snapshot.nodes)} nodes, {len(pending)} pending, {len(snapshot.workloads) - len(pending)} running"
    )

    t0 = time.process_time()
    run_cycle(snapshot, policy, NOW)
    cycle_s = time.process_time() - t0
    print(f"full cycle (run_cycle, forecast included, CPU): {cycle_s * 1000:.0f} ms")

    t0 = time.process_time()
    dry = DryRun(snapshot, policy, NOW)
    print(f"dry-run state (one cycle, kept, CPU): {(time.process_time() - t0) * 1000:.0f} ms")

    rng = random.Random(args.seed)
    times = []
    with_suggestions = []
    verdicts: dict[str, int] = {}
    models = ("A100-80GB", "H100-80GB", "L40S")
    for i in range(args.checks):
        template = rng.choice(pending)
        candidate = replace(template, id=f"dry-{i}", created_at=NOW)
        t0 = time.process_time()
        check = dry.check(candidate)
        times.append(time.process_time() - t0)
        dry.suggestions(candidate, check, models)
        with_suggestions.append(time.process_time() - t0)
        verdicts[check.verdict] = verdicts.get(check.verdict, 0) + 1
    ms = np.array(times) * 1000
    p50, p95 = np.percentile(ms, [50, 95])
    print(f"dry run (CPU): {len(ms)} checks, P50 {p50:.1f} ms, P95 {p95:.1f} ms, max {ms.max():.1f} ms  {verdicts}")
    both = np.array(with_suggestions) * 1000
    s50, s95 = np.percentile(both, [50, 95])
    print(f"check + suggestions (the endpoint's engine work): P50 {s50:.1f} ms, P95 {s95:.1f} ms, max {both.max():.1f}")
    print(
        f"P95 dry run / full cycle: {p95 / (cycle_s * 1000):.3f}  "
        f"(target P95 <= 100 ms: {'met' if p95 <= 100 else 'NOT met'})"
    )
    burst(dry, pending, models, args)
    burst(DryRun(snapshot, policy, NOW), pending, models, args, clients=4)


def burst(dry: DryRun, pending: list, models: tuple[str, ...], args: argparse.Namespace, clients: int = 1) -> None:
    """A burst between two cycles: check k (with its suggestions) counts the k jobs submitted before
    it since the state was read (the dry run's step 5: they are decided first, on a copy of the state).
    With ``clients`` > 1, submissions commit out of their creation order (shuffled in groups of that
    many, as from that many clients at once) and each check sees the committed ones oldest first."""
    rng = random.Random(args.seed + 1)
    jobs = [replace(rng.choice(pending), id=f"burst-{i}", created_at=NOW + 1 + i) for i in range(args.burst)]
    order = list(range(len(jobs)))
    for start in range(0, len(order), clients):
        group = order[start : start + clients]
        rng.shuffle(group)
        order[start : start + clients] = group
    committed: list = []
    times = []
    verdicts: dict[str, int] = {}
    for i in order:
        candidate = jobs[i]
        later = [(w, None) for w in sorted(committed, key=lambda w: w.created_at)]
        t0 = time.process_time()
        check = dry.check(candidate, later=later)
        dry.suggestions(candidate, check, models, later)
        times.append(time.process_time() - t0)
        verdicts[check.verdict] = verdicts.get(check.verdict, 0) + 1
        committed.append(candidate)  # submitted: the next check counts it
    if times:
        ms = np.array(times) * 1000
        p50, p95 = np.percentile(ms, [50, 95])
        how = "in order" if clients == 1 else f"from {clients} clients, committed out of order"
        print(
            f"burst of {len(ms)} ({how}; each check counts the submissions before it; CPU, with suggestions): "
            f"P50 {p50:.1f} ms, P95 {p95:.1f} ms, max {ms.max():.1f} ms  {verdicts}"
        )


if __name__ == "__main__":
    main()
