"""Hypothesis invariants: nothing over-committed (GPU devices, MIG slices, CPU, memory), no quota or
limit exceeded, gangs all-or-nothing, every pending job decided, same input -> same plan."""

from __future__ import annotations

import os
from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduling.engine.cycle import run_cycle
from scheduling.engine.mig import mig_geometry
from scheduling.engine.model import (
    ClusterQueue,
    FlavorQuota,
    GpuNode,
    LocalQueue,
    Plan,
    Policy,
    Resources,
    Snapshot,
    Workload,
    WorkloadState,
    labels_of,
)

from .builders import RACK, apply_plan

MODELS = ("A100-80GB", "H100-80GB")
PROFILES = ("1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")
# ENGINE_EXAMPLES=400 for a deeper search; the default keeps the suite fast.
SETTINGS = settings(
    max_examples=int(os.environ.get("ENGINE_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@st.composite
def nodes(draw):
    count = draw(st.integers(1, 6))
    out = []
    for i in range(count):
        model = draw(st.sampled_from((*MODELS, None)))
        out.append(
            GpuNode(
                name=f"n{i}",
                gpu_model=model,
                gpu_count=draw(st.integers(1, 8)) if model else 0,
                cpu_milli=draw(st.sampled_from((8000, 32_000))),
                memory_mib=draw(st.sampled_from((16_000, 64_000))),
                gpu_memory_gib=80 if model else 0,
                labels=labels_of({RACK: f"r{i % 2}"}),
                unschedulable=draw(st.booleans()) and i > 0 and draw(st.booleans()),
                mig_enabled=bool(model) and draw(st.integers(0, 3)) == 0,
            )
        )
    return tuple(out)


def flavor():
    return st.builds(
        FlavorQuota,
        st.sampled_from(MODELS),
        st.integers(0, 12),
        st.one_of(st.none(), st.integers(0, 6)),
        st.one_of(st.none(), st.integers(0, 6)),
    )


@st.composite
def queues(draw):
    cqs = []
    for i in range(draw(st.integers(1, 3))):
        flavors = draw(st.lists(flavor(), min_size=1, max_size=2, unique_by=lambda f: f.gpu_model))
        cqs.append(
            ClusterQueue(
                name=f"cq{i}",
                cohort=draw(st.sampled_from(("", "co"))),
                flavors=tuple(flavors),
                cpu_milli=draw(st.one_of(st.none(), st.sampled_from((8000, 40_000)))),
                weight=draw(st.sampled_from((1.0, 2.0))),
            )
        )
    lqs = [LocalQueue(f"lq{i}", f"team{i % 2}", cqs[i % len(cqs)].name) for i in range(draw(st.integers(1, 4)))]
    return tuple(cqs), tuple(lqs)


@st.composite
def resources(draw):
    kind = draw(st.sampled_from(("whole", "fraction", "mig", "memory", "cpu")))
    cpu = draw(st.sampled_from((500, 2000, 6000)))
    mem = draw(st.sampled_from((512, 4000, 20_000)))
    if kind == "whole":
        return Resources(gpu=draw(st.integers(1, 4)), cpu_milli=cpu, memory_mib=mem)
    if kind == "fraction":
        return Resources(gpu_milli=draw(st.sampled_from((100, 250, 500, 700))), cpu_milli=cpu, memory_mib=mem)
    if kind == "mig":
        return Resources(mig_profile=draw(st.sampled_from(PROFILES)), cpu_milli=cpu, memory_mib=mem)
    if kind == "memory":
        return Resources(gpu_memory_gib=draw(st.sampled_from((40, 140, 200))), cpu_milli=cpu, memory_mib=mem)
    return Resources(cpu_milli=cpu, memory_mib=mem)


@st.composite
def jobs(draw, lqs, prefix, start):
    out = []
    for j in range(draw(st.integers(0, 14))):
        replicas = draw(st.integers(1, 3))
        out.append(
            Workload(
                id=f"{prefix}{j}",
                local_queue=draw(st.sampled_from([lq.name for lq in lqs])),
                team=draw(st.sampled_from(("team0", "team1"))),
                priority=draw(st.integers(0, 2)),
                created_at=start + j,
                resources=draw(resources()),
                replicas=replicas,
                min_available=draw(st.integers(0, replicas)),
                preemptible=draw(st.integers(0, 4)) > 0,
                allowed_gpu_models=draw(st.sampled_from(((), (MODELS[0],)))),
                runtime_s=draw(st.sampled_from((60.0, 3600.0))),
            )
        )
    return out


@st.composite
def scenarios(draw):
    node_list = draw(nodes())
    cqs, lqs = draw(queues())
    first = draw(jobs(lqs, "a", 0))
    second = draw(jobs(lqs, "b", 100))
    placement = draw(st.sampled_from(("binpack", "spread", "fgd", "random", "bestfit", "packing")))
    blocked = draw(st.sampled_from(((), (("team1", "budget"),))))
    policy = Policy(placement=placement, seed=draw(st.integers(0, 3)))
    return Snapshot(node_list, cqs, lqs, tuple(first), teams_blocked=blocked), second, policy


def settle(snap: Snapshot, second: list[Workload], policy: Policy) -> tuple[Snapshot, Plan]:
    """First cycle on an empty cluster, apply it, add more jobs: the second cycle starts from running load."""
    from dataclasses import replace

    plan = run_cycle(snap, policy, 1000.0)
    snap = apply_plan(snap, plan, 1000.0)
    snap = replace(snap, workloads=snap.workloads + tuple(second))
    return snap, run_cycle(snap, policy, 2000.0)


def held(snap: Snapshot, plan: Plan):
    """Every placement in force after the plan: running minus victims, plus admissions."""
    victims = {p.workload_id for p in plan.preemptions}
    by_id = {w.id: w for w in snap.workloads}
    out = [(w, w.gpu_model, p) for w in snap.workloads if w.state != WorkloadState.PENDING for p in w.placements]
    out += [(by_id[a.workload_id], a.gpu_model, p) for a in plan.admissions for p in a.placements]
    return [(w, m, p) for w, m, p in out if w.id not in victims], victims


def check_capacity(snap: Snapshot, plan: Plan) -> None:
    nodes_by_name = {n.name: n for n in snap.nodes}
    share: defaultdict[tuple[str, int], int] = defaultdict(int)
    slices: defaultdict[tuple[str, int], int] = defaultdict(int)
    compute: defaultdict[tuple[str, int], int] = defaultdict(int)
    cpu: defaultdict[str, int] = defaultdict(int)
    mem: defaultdict[str, int] = defaultdict(int)
    placements, victims = held(snap, plan)
    # Victims still hold their resources in this plan; they leave before the preemptor starts.
    placements += [(w, w.gpu_model, p) for w in snap.workloads if w.id in victims for p in w.placements]
    for _, _, p in placements:
        node = nodes_by_name[p.node]
        cpu[p.node] += p.cpu_milli
        mem[p.node] += p.memory_mib
        for d in p.gpu_indices:
            assert 0 <= d < node.gpu_count
            if p.mig_profile:
                assert node.mig_enabled
                geometry = mig_geometry(p.mig_profile, node.gpu_memory_gib)
                assert geometry is not None
                assert p.mig_slot in geometry.starts
                mask = geometry.mask_at(p.mig_slot)
                assert slices[(p.node, d)] & mask == 0, "MIG slices overlap"
                slices[(p.node, d)] |= mask
                compute[(p.node, d)] += geometry.compute
                assert compute[(p.node, d)] <= 7
            else:
                assert not node.mig_enabled
                share[(p.node, d)] += p.gpu_milli
                assert share[(p.node, d)] <= 1000, "GPU device over-committed"
    for name, node in nodes_by_name.items():
        assert cpu[name] <= node.cpu_milli
        assert mem[name] <= node.memory_mib
    for a in plan.admissions:
        assert not nodes_by_name[a.placements[0].node].unschedulable


def check_quota(snap: Snapshot, plan: Plan) -> None:
    lq_cq = {lq.name: lq.cluster_queue for lq in snap.local_queues}
    by_cq = {cq.name: cq for cq in snap.cluster_queues}
    admitted = {a.workload_id for a in plan.admissions}
    usage: defaultdict[tuple[str, str | None], int] = defaultdict(int)
    for w, model, p in held(snap, plan)[0]:
        if w.id not in admitted:
            continue  # the first cycle's load was itself admitted under the same rules
        if p.gpu_indices and model:
            milli = p.gpu_milli
            if p.mig_profile:
                milli = mig_geometry(p.mig_profile, 80).gpu_milli  # type: ignore[union-attr]
            usage[(lq_cq[w.local_queue], model)] += milli * len(p.gpu_indices)
    before: defaultdict[tuple[str, str | None], int] = defaultdict(int)
    for w in snap.workloads:
        if w.state != WorkloadState.PENDING and w.id not in {v.workload_id for v in plan.preemptions}:
            for p in w.placements:
                if p.gpu_indices and w.gpu_model:
                    milli = p.gpu_milli
                    if p.mig_profile:
                        milli = mig_geometry(p.mig_profile, 80).gpu_milli  # type: ignore[union-attr]
                    before[(lq_cq[w.local_queue], w.gpu_model)] += milli * len(p.gpu_indices)
    cohorts = defaultdict(list)
    for cq in snap.cluster_queues:
        cohorts[cq.cohort].append(cq)
    for cq in snap.cluster_queues:
        for f in cq.flavors:
            total = usage[(cq.name, f.gpu_model)] + before[(cq.name, f.gpu_model)]
            if not usage[(cq.name, f.gpu_model)]:
                continue
            if not cq.cohort:
                assert total <= f.nominal_gpus * 1000
            elif f.borrowing_limit is not None:
                assert total <= (f.nominal_gpus + f.borrowing_limit) * 1000
    for cohort, members in cohorts.items():
        if not cohort:
            continue
        for model in MODELS:
            lendable = used = 0
            grew = False
            for cq in members:
                flavor = next((f for f in cq.flavors if f.gpu_model == model), None)
                if flavor is None:
                    continue
                n = flavor.nominal_gpus * 1000
                lend = n if flavor.lending_limit is None else min(n, flavor.lending_limit * 1000)
                total = usage[(cq.name, model)] + before[(cq.name, model)]
                lendable += lend
                used += max(0, total - (n - lend))
                grew |= usage[(cq.name, model)] > 0
            if grew:
                assert used <= lendable, f"cohort {cohort} over its pool for {model}"
    for a in plan.admissions:
        assert by_cq[lq_cq[next(w for w in snap.workloads if w.id == a.workload_id).local_queue]]


@SETTINGS
@given(scenarios())
def test_no_device_slice_cpu_or_memory_is_over_committed(scenario):
    snap, second, policy = scenario
    snap, plan = settle(snap, second, policy)
    check_capacity(snap, plan)


@SETTINGS
@given(scenarios())
def test_no_quota_or_limit_is_exceeded(scenario):
    snap, second, policy = scenario
    snap, plan = settle(snap, second, policy)
    check_quota(snap, plan)


@SETTINGS
@given(scenarios())
def test_gangs_are_all_or_nothing_and_every_job_is_decided(scenario):
    snap, second, policy = scenario
    snap, plan = settle(snap, second, policy)
    by_id = {w.id: w for w in snap.workloads}
    for a in plan.admissions:
        w = by_id[a.workload_id]
        assert w.gang_size <= len(a.placements) <= w.replicas
        assert w.team not in dict(snap.teams_blocked)
    decided = [a.workload_id for a in plan.admissions] + [p.workload_id for p in plan.pending]
    pending = [w.id for w in snap.workloads if w.state == WorkloadState.PENDING]
    assert sorted(decided) == sorted(pending)
    victims = {p.workload_id for p in plan.preemptions}
    assert all(by_id[v].preemptible and by_id[v].state != WorkloadState.PENDING for v in victims)


@SETTINGS
@given(scenarios())
def test_same_input_same_plan(scenario):
    snap, second, policy = scenario
    _, one = settle(snap, second, policy)
    _, two = settle(snap, second, policy)
    assert one == two


@SETTINGS
@given(scenarios())
def test_preemption_settles_and_never_hits_a_job_twice(scenario):
    """Closed world (no arrivals, no completions), plans applied cycle after cycle: preemptions stop
    and no job is preempted twice (no loops)."""
    from collections import Counter
    from dataclasses import replace

    snap, second, policy = scenario
    snap = replace(snap, workloads=snap.workloads + tuple(second))
    preempted: Counter[str] = Counter()
    now = 1000.0
    for _ in range(10):
        plan = run_cycle(snap, policy, now)
        preempted.update(p.workload_id for p in plan.preemptions)
        snap = apply_plan(snap, plan, now)
        now += 1
    assert run_cycle(snap, policy, now).preemptions == ()
    assert max(preempted.values(), default=0) <= 1


@SETTINGS
@given(scenarios())
def test_cpu_quota_is_not_exceeded(scenario):
    snap, second, policy = scenario
    snap, plan = settle(snap, second, policy)
    lq_cq = {lq.name: lq.cluster_queue for lq in snap.local_queues}
    victims = {p.workload_id for p in plan.preemptions}
    by_id = {w.id: w for w in snap.workloads}
    total: defaultdict[str, int] = defaultdict(int)
    grew: set[str] = set()
    for w in snap.workloads:
        if w.state != WorkloadState.PENDING and w.id not in victims:
            total[lq_cq[w.local_queue]] += sum(p.cpu_milli for p in w.placements)
    for a in plan.admissions:
        cq = lq_cq[by_id[a.workload_id].local_queue]
        total[cq] += sum(p.cpu_milli for p in a.placements)
        grew.add(cq)
    pool = sum(cq.cpu_milli or 0 for cq in snap.cluster_queues if cq.cohort and cq.cpu_milli is not None)
    pooled = sum(total[cq.name] for cq in snap.cluster_queues if cq.cohort and cq.cpu_milli is not None)
    for cq in snap.cluster_queues:
        if cq.cpu_milli is None or cq.name not in grew:
            continue
        if not cq.cohort:
            assert total[cq.name] <= cq.cpu_milli
        else:
            assert pooled <= pool
