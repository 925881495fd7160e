"""Benchmark one scheduling cycle: 10,000 pending jobs in 100 queues on 5,000 nodes / 40,000 GPUs.

    .venv/bin/python bench/bench_cycle.py [--nodes 5000] [--jobs 10000] [--queues 100]
                                          [--placement portal,binpack] [--running 0.5] [--repeat 5]

Runs the cycle for each placement policy of ``--placement`` side by side (alternating, ``--repeat``
rounds, on the same snapshot in one process) and prints per policy the median cycle CPU and wall time
and their ratio to the first policy's. The default compares the portal's default policy (``portal``,
fragmentation-aware) with ``binpack``; the target is a median cycle CPU time of at most 1.0 s for
``portal`` and a peak memory of at most 150 MiB.

Prints the snapshot build time, each cycle's wall and CPU time (CPU time is the steadier figure on a
shared machine), decisions per second (every pending job gets a
decision: admitted, preempting, or pending with a reason and an estimated start) and the peak resident
memory of the process. The cluster is synthetic but shaped like a real one: three GPU models, 8 GPUs
per node, racks and zones, a spot pool with a taint, some MIG nodes and cordoned nodes; jobs are a mix
of 1/2/4/8-GPU jobs, fractions, MIG slices, GPU-memory requests, gangs of 2-16 replicas and CPU-only
work, with running jobs already holding about ``--running`` of the GPUs. ``--rules 0.2`` gives a
fifth of the pending jobs Kubernetes placement rules (a required node affinity ``pool NotIn [spot]``
and a preferred one, a ScheduleAnyway zone spread, anti-affinity between a gang's replicas, every
tenth of them one rack), to measure what rules cost; the default (0) is the rule-free mix.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduling.engine.cycle import run_cycle
from scheduling.engine.model import (
    AntiAffinityTerm,
    ClusterQueue,
    FlavorQuota,
    GpuNode,
    LocalQueue,
    NodeSelectorTerm,
    PlacementRules,
    Policy,
    PreferredTerm,
    ReplicaPlacement,
    Requirement,
    Resources,
    Snapshot,
    SpreadConstraint,
    Taint,
    Toleration,
    Workload,
    WorkloadState,
    labels_of,
)

MODELS = (("A100-80GB", 80), ("H100-80GB", 80), ("L40S", 48))


def placement_rules(rng: random.Random, replicas: int) -> PlacementRules:
    """Rules as users write them (drawn from their own generator, so the rule-free mix is unchanged)."""
    return PlacementRules(
        required_terms=(NodeSelectorTerm((Requirement("pool", "NotIn", ("spot",)),)),),
        preferred_terms=(
            PreferredTerm(10, NodeSelectorTerm((Requirement("topology.kubernetes.io/zone", "In", ("z1",)),))),
        ),
        anti_affinity=(AntiAffinityTerm("kubernetes.io/hostname", 0 if rng.random() < 0.5 else 50),)
        if replicas > 1
        else (),
        spread=(SpreadConstraint(1, "topology.kubernetes.io/zone", "ScheduleAnyway"),),
        required_topology="rack" if rng.random() < 0.1 else "",
    )


def build(nodes: int, jobs: int, queues: int, running: float, seed: int, rules: float = 0.0) -> Snapshot:
    rng = random.Random(seed)
    rules_rng = random.Random(seed + 1)
    node_list: list[GpuNode] = []
    for i in range(nodes):
        model, memory = MODELS[i % len(MODELS)]
        spot = i % 10 == 9
        labels = {
            "topology.kubernetes.io/zone": f"z{i % 4}",
            "topology.kubernetes.io/rack": f"r{i // 20}",
            "pool": "spot" if spot else "main",
        }
        node_list.append(
            GpuNode(
                name=f"node-{i:05d}",
                gpu_model=model,
                gpu_count=8,
                cpu_milli=128_000,
                memory_mib=1_024_000,
                gpu_memory_gib=memory,
                labels=labels_of(labels),
                taints=(Taint("spot", "true"),) if spot else (),
                unschedulable=i % 97 == 0,
                mig_enabled=model != "L40S" and i % 50 == 1,
            )
        )
    n_cq = max(1, queues // 5)
    cqs = []
    for c in range(n_cq):
        flavors = tuple(
            FlavorQuota(m, nominal_gpus=nodes * 8 // len(MODELS) // n_cq, borrowing_limit=None) for m, _ in MODELS
        )
        if c % 3 == 1:
            flavors = flavors[1:] + flavors[:1]  # a different model order
        cqs.append(
            ClusterQueue(
                name=f"cq-{c:03d}",
                cohort=f"cohort-{c % 4}",
                flavors=flavors,
                cpu_milli=nodes * 128_000 // n_cq,
                weight=1.0 + (c % 3),
            )
        )
    lqs = [
        LocalQueue(name=f"lq-{q:03d}", team=f"team-{q % 40}", cluster_queue=f"cq-{q % n_cq:03d}") for q in range(queues)
    ]
    workloads: list[Workload] = []
    # Running load: whole-GPU and fractional jobs filling about `running` of the non-MIG GPUs.
    for i, node in enumerate(node_list):
        if node.mig_enabled or node.unschedulable:
            continue
        used = round(8 * running + rng.uniform(-2, 2))
        used = max(0, min(8, used))
        d = 0
        k = 0
        while d < used:
            size = min(rng.choice((1, 1, 2, 4)), used - d)
            q = rng.randrange(queues)
            workloads.append(
                Workload(
                    id=f"run-{i}-{k}",
                    local_queue=f"lq-{q:03d}",
                    team=f"team-{q % 40}",
                    priority=rng.choice((0, 0, 10)),
                    created_at=rng.uniform(0, 1000),
                    resources=Resources(gpu=size, cpu_milli=4000 * size, memory_mib=32_000 * size),
                    state=WorkloadState.RUNNING,
                    gpu_model=node.gpu_model,
                    placements=(
                        ReplicaPlacement(
                            node=node.name,
                            gpu_indices=tuple(range(d, d + size)),
                            gpu_milli=1000,
                            cpu_milli=4000 * size,
                            memory_mib=32_000 * size,
                        ),
                    ),
                    started_at=rng.uniform(0, 1000),
                    runtime_s=rng.choice((1800.0, 3600.0, 7200.0, 86400.0)),
                    tolerations=(Toleration("spot", "Exists"),),
                )
            )
            d += size
            k += 1
    for j in range(jobs):
        q = rng.randrange(queues)
        kind = rng.random()
        replicas = 1
        allowed: tuple[str, ...] = ()
        if kind < 0.45:
            res = Resources(gpu=rng.choice((1, 1, 2, 4, 8)), cpu_milli=8000, memory_mib=64_000)
        elif kind < 0.65:
            res = Resources(gpu_milli=rng.choice((100, 250, 500, 700)), cpu_milli=2000, memory_mib=8000)
        elif kind < 0.72:
            res = Resources(mig_profile=rng.choice(("1g.10gb", "3g.40gb", "7g.80gb")), cpu_milli=2000)
            allowed = ("A100-80GB", "H100-80GB")
        elif kind < 0.77:
            res = Resources(gpu_memory_gib=rng.choice((140, 300)), cpu_milli=8000, memory_mib=64_000)
            allowed = ("A100-80GB", "H100-80GB")
        elif kind < 0.92:
            res = Resources(gpu=rng.choice((4, 8)), cpu_milli=16_000, memory_mib=128_000)
            replicas = rng.choice((2, 4, 8, 16))
        else:
            res = Resources(cpu_milli=rng.choice((1000, 4000)), memory_mib=4000)
        if kind < 0.3 and rng.random() < 0.3:
            allowed = (rng.choice(MODELS)[0],)
        workloads.append(
            Workload(
                id=f"job-{j:05d}",
                local_queue=f"lq-{q:03d}",
                team=f"team-{q % 40}",
                priority=rng.choice((0, 0, 0, 10, 100)),
                created_at=1000.0 + j,
                resources=res,
                replicas=replicas,
                allowed_gpu_models=allowed,
                tolerations=(Toleration("spot", "Exists"),) if rng.random() < 0.3 else (),
                preferred_labels=(("topology.kubernetes.io/zone", "z1", 10),) if rng.random() < 0.1 else (),
                runtime_s=rng.choice((600.0, 3600.0, 14400.0)),
                rules=placement_rules(rules_rng, replicas) if rules and rules_rng.random() < rules else None,
            )
        )
    return Snapshot(
        nodes=tuple(node_list),
        cluster_queues=tuple(cqs),
        local_queues=tuple(lqs),
        workloads=tuple(workloads),
        teams_blocked=(("team-7", "over budget"),),
        gpu_memory_gib=tuple((m, g) for m, g in MODELS),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--queues", type=int, default=100)
    parser.add_argument("--placement", default="portal,binpack", help="comma-separated policies to compare")
    parser.add_argument("--running", type=float, default=0.5, help="fraction of GPUs already in use")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rules", type=float, default=0.0, help="fraction of pending jobs with placement rules")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of one cycle")
    args = parser.parse_args()

    t0 = time.perf_counter()
    snapshot = build(args.nodes, args.jobs, args.queues, args.running, args.seed, args.rules)
    build_s = time.perf_counter() - t0
    pending = sum(1 for w in snapshot.workloads if w.state == WorkloadState.PENDING)
    gpus = sum(n.gpu_count for n in snapshot.nodes)
    print(
        f"snapshot: {len(snapshot.nodes)} nodes, {gpus} GPUs, {len(snapshot.local_queues)} queues, "
        f"{pending} pending, {len(snapshot.workloads) - pending} running (built in {build_s:.2f} s)"
    )
    names = [name.strip() for name in args.placement.split(",") if name.strip()]
    if args.profile:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.enable()
        run_cycle(snapshot, Policy(placement=names[0], seed=args.seed), 5000.0)
        profiler.disable()
        pstats.Stats(profiler).sort_stats(os.environ.get("SORT", "cumulative")).print_stats(30)
        return
    times: dict[str, list[float]] = {name: [] for name in names}
    cpu_times: dict[str, list[float]] = {name: [] for name in names}
    plans = {}
    for _ in range(args.repeat):
        for name in names:  # alternating: both see the same machine load
            policy = Policy(placement=name, seed=args.seed)
            t0, c0 = time.perf_counter(), time.process_time()
            plans[name] = run_cycle(snapshot, policy, 5000.0)
            times[name].append(time.perf_counter() - t0)
            cpu_times[name].append(time.process_time() - c0)
    first = names[0]
    for name in names:
        plan = plans[name]
        stats = dict(plan.stats)
        cpu_median = statistics.median(cpu_times[name])
        wall_median = statistics.median(times[name])
        decisions = len(plan.admissions) + len(plan.pending)
        print(f"placement policy: {name}")
        print(f"  cycle time: {', '.join(f'{t:.3f}' for t in times[name])} s (median {wall_median:.3f} s)")
        print(
            f"  cycle CPU time: {', '.join(f'{t:.3f}' for t in cpu_times[name])} s (median {cpu_median:.3f} s, "
            f"{cpu_median / statistics.median(cpu_times[first]):.2f} x {first})"
        )
        print(
            f"  decisions: {decisions} ({len(plan.admissions)} admitted, {len(plan.preemptions)} preemptions, "
            f"{len(plan.pending)} pending with reasons) -> {decisions / wall_median:,.0f} decisions/s "
            f"({decisions / cpu_median:,.0f} per CPU-second)"
        )
        print(f"  placement attempts: {stats.get('placement_attempts')}, shape-cache hits: {stats.get('cache_hits')}")
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak memory (max RSS of this process, all policies): {peak_mib:,.0f} MiB")


if __name__ == "__main__":
    main()
