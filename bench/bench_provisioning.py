"""Benchmark the capacity signal (``scheduling.engine.provisioning``) against the cycle it follows.

    .venv/bin/python bench/bench_provisioning.py [--nodes 5000] [--jobs 10000] [--placement portal] [--repeat 3]

On ``bench_cycle``'s synthetic cluster (the same snapshot builder), runs one cycle, then sizes the new
nodes for every job the plan leaves waiting for capacity, ``--repeat`` times side by side with the
cycle, and prints the median CPU time of each, their ratio, how many jobs waited for capacity, how
many distinct job shapes were sized and how many got a request. Target: the signal costs at most
half a cycle.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_cycle import build
from scheduling.engine.cycle import run_cycle
from scheduling.engine.model import Policy
from scheduling.engine.provisioning import capacity_requests, waiting_for_capacity


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--queues", type=int, default=100)
    parser.add_argument("--running", type=float, default=0.5)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--placement", default="portal", help="the placement policy (the default's is portal)")
    args = parser.parse_args()
    snapshot = build(args.nodes, args.jobs, args.queues, args.running, args.seed)
    policy = Policy(placement=args.placement)
    cycle_s, signal_s = [], []
    requests: tuple = ()
    plan = None
    for _ in range(args.repeat):
        start = time.process_time()
        plan = run_cycle(snapshot, policy, 2000.0)
        cycle_s.append(time.process_time() - start)
        start = time.process_time()
        requests = capacity_requests(snapshot, plan, policy)
        signal_s.append(time.process_time() - start)
    assert plan is not None
    waiting = waiting_for_capacity(plan)
    shapes = {
        (w.resources, w.replicas, w.min_available, w.allowed_gpu_models, w.node_selector, w.tolerations, w.rules)
        for w in snapshot.workloads
        if w.id in waiting
    }
    cycle, signal = statistics.median(cycle_s), statistics.median(signal_s)
    print(f"nodes {args.nodes}, jobs {args.jobs}: {len(plan.pending)} pending, {len(waiting)} waiting for capacity")
    print(f"distinct shapes sized: {len(shapes)}; requests: {len(requests)}")
    print(f"cycle CPU median {cycle:.3f} s; capacity signal CPU median {signal:.3f} s; ratio {signal / cycle:.2f}")


if __name__ == "__main__":
    main()
