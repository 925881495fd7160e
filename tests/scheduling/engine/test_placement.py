"""Placement: filters (model, selector, taints, cordon, MIG, GPU memory), scores (bin-pack, spread,
affinity, topology, pools, the FGD paper's policies) and determinism."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.engine.capacity import Cluster, Statement
from scheduling.engine.cycle import run_cycle
from scheduling.engine.model import Policy, ReplicaPlacement, Snapshot, Taint, Toleration, labels_of
from scheduling.engine.placement import Placer

from .builders import RACK, ZONE, admitted_ids, cq, job, lq, node, reason_of, running, snapshot
from .strategies import loaded_clusters, shapes

NOW = 1000.0
QUEUES = ([cq("q", {"A100-80GB": 1000, "H100-80GB": 1000, "L40S": 1000})], [lq("a", "q")])
A100 = ("A100-80GB",)


def place(nodes, jobs, policy=None, **snap_kwargs):
    snap = snapshot(nodes, *QUEUES, jobs, **snap_kwargs)
    return run_cycle(snap, policy or Policy(), NOW)


def nodes_of(plan, workload_id):
    for a in plan.admissions:
        if a.workload_id == workload_id:
            return [p.node for p in a.placements]
    raise AssertionError(f"{workload_id} not admitted")


def test_required_node_selector():
    nodes = [node("n1", labels={"disk": "hdd"}), node("n2", labels={"disk": "ssd"})]
    plan = place(
        nodes,
        [
            job("ssd", "a", gpu=1, node_selector=labels_of({"disk": "ssd"})),
            job("nvme", "a", gpu=1, node_selector=labels_of({"disk": "nvme"}), created=1, allowed_gpu_models=A100),
        ],
    )
    assert nodes_of(plan, "ssd") == ["n2"]
    assert reason_of(plan, "nvme") == (
        "placement: never fits as configured: none of the 2 A100-80GB nodes passes the job's filters: "
        "2 node selector does not match"
    )


def test_taints_need_tolerations():
    spot = node("spot1", taints=(Taint("spot", "true"),))
    plan = place(
        [spot],
        [
            job("plain", "a", gpu=1, allowed_gpu_models=A100),
            job("tolerant", "a", gpu=1, tolerations=(Toleration("spot", "Exists"),), created=1),
        ],
    )
    assert admitted_ids(plan) == ["tolerant"]
    assert reason_of(plan, "plain") == (
        "placement: never fits as configured: none of the 1 A100-80GB node passes the job's filters: "
        "1 untolerated taint"
    )


def test_prefer_no_schedule_taint_is_only_avoided():
    soft = node("a-soft", taints=(Taint("busy", "", "PreferNoSchedule"),))
    plan = place([soft, node("b-plain")], [job("j", "a", gpu=1)])
    assert nodes_of(plan, "j") == ["b-plain"]


def test_cordoned_nodes_and_gpu_models_are_counted_in_the_reason():
    nodes = [node("c1", cordoned=True), node("h1", "H100-80GB", 1), node("cpu", None), node("a1", gpus=1)]
    plan = place(
        nodes,
        [running("r", "a", [("a1", (0,))]), job("j", "a", gpu=1, allowed_gpu_models=("A100-80GB",))],
    )
    assert reason_of(plan, "j") == (
        "placement: 0 of 4 nodes fit: 2 GPU model not A100-80GB, 1 cordoned, 1 too few free GPUs; needs 1 free "
        "A100-80GB GPU on one node; eligible nodes have at most 0 free each and 0 in all (capacity in use)"
    )


def test_whole_gpus_of_one_replica_are_on_one_node_and_contiguous():
    nodes = [node("n1", gpus=4), node("n2", gpus=4)]
    plan = place(
        nodes,
        [running("r", "a", [("n1", (1,)), ("n2", (0,))]), job("j", "a", gpu=3)],
    )
    (p,) = next(a for a in plan.admissions if a.workload_id == "j").placements
    assert p.node == "n2"
    assert p.gpu_indices == (1, 2, 3)


@pytest.mark.parametrize(
    ("requests", "placed_slots"),
    [
        # Hand-derived from NVIDIA's A100-80GB placements and the slot rule (tests/.../test_mig.py).
        (["3g.40gb", "3g.40gb", "1g.10gb"], [4, 0, None]),
        (["4g.40gb", "3g.40gb"], [0, 4]),
        (["7g.80gb", "1g.10gb"], [0, None]),
        (["1g.10gb"] * 8, [6, 4, 5, 0, 1, 2, 3, None]),
        (["2g.20gb", "2g.20gb", "2g.20gb", "1g.10gb", "1g.10gb"], [4, 0, 2, 6, None]),
    ],
)
def test_mig_slices_follow_the_real_geometry(requests, placed_slots):
    jobs = [job(f"m{i}", "a", mig=p, created=i, cpu=0, mem=0) for i, p in enumerate(requests)]
    plan = place([node("m1", "A100-80GB", 1, mig=True)], jobs)
    slots = []
    by_id = {a.workload_id: a for a in plan.admissions}
    for i in range(len(requests)):
        a = by_id.get(f"m{i}")
        slots.append(a.placements[0].mig_slot if a else None)
    assert slots == placed_slots


def test_mig_profiles_are_per_gpu_model_and_mig_nodes_take_no_fractions():
    nodes = [node("m1", "A100-80GB", 1, mig=True)]
    plan = place(
        nodes,
        [
            job("ok", "a", mig="1g.10gb"),
            job("unknown", "a", mig="5g.50gb", created=1),
            job("fraction", "a", milli=500, created=2),
        ],
        mig_profiles=(("A100-80GB", ("1g.10gb", "3g.40gb", "7g.80gb")),),
    )
    assert admitted_ids(plan) == ["ok"]
    # Never fits: a profile no model offers; a fraction on a cluster whose only nodes are in MIG mode.
    assert reason_of(plan, "unknown") == (
        "placement: never fits as configured: on A100-80GB: A100-80GB does not offer MIG profile 5g.50gb; "
        "on H100-80GB: MIG profile 5g.50gb is not in NVIDIA's MIG table for H100-80GB; "
        "on L40S: L40S is not a MIG GPU (no NVIDIA MIG table matches it)"
    )
    assert reason_of(plan, "fraction").startswith(
        "placement: never fits as configured: on A100-80GB: none of the 1 A100-80GB node passes the job's filters: "
        "1 MIG mode does not match; "
    )


@pytest.mark.parametrize(("model", "memory", "devices"), [("A100-80GB", 80, 2), ("L40S", 48, 3)])
def test_gpu_memory_becomes_a_device_count_per_model(model, memory, devices):
    plan = place(
        [node("n1", model, 8, gpu_memory_gib=memory)],
        [job("llm-70b", "a", gpu_mem=140, allowed_gpu_models=(model,))],
    )
    (p,) = plan.admissions[0].placements
    assert len(p.gpu_indices) == devices


def test_binpack_fills_the_busier_node_and_spread_the_emptier():
    nodes = [node("n1", gpus=4), node("n2", gpus=4)]
    base = [running("r", "a", [("n2", (0, 1))])]
    assert nodes_of(place(nodes, [*base, job("j", "a", gpu=1)], Policy(placement="binpack")), "j") == ["n2"]
    assert nodes_of(place(nodes, [*base, job("j", "a", gpu=1)], Policy(placement="spread")), "j") == ["n1"]


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"replicas": 2}, {"preferred_labels": (("absent", "label", 1),)}],
    ids=["one replica", "two replicas", "unmatched preference"],
)
def test_cpu_only_jobs_avoid_gpu_nodes_even_when_binpack_prefers_the_busier_gpu_node(kwargs):
    # g (GPU) is busier on CPU than c (CPU-only): binpack's own vote favours g, GPU avoidance must win.
    nodes = [node("g", gpus=8, cpu=64_000), node("c", None, cpu=64_000)]
    busy = running("r", "a", [("g", (0,))], cpu=30_000)
    plan = place(nodes, [busy, job("j", "a", cpu=1000, **kwargs)], Policy(placement="binpack"))
    assert set(nodes_of(plan, "j")) == {"c"}


def test_preferred_affinity_weights_pick_the_node():
    nodes = [node("n1", labels={ZONE: "z1"}), node("n2", labels={ZONE: "z2"})]
    plan = place(nodes, [job("j", "a", gpu=1, preferred_labels=((ZONE, "z2", 50),))])
    assert nodes_of(plan, "j") == ["n2"]


def test_gang_replicas_stay_within_one_rack_when_one_can_hold_them():
    # Rack r1 has two empty 8-GPU nodes (room for 4 replicas of 4 GPUs); rack r0 has fuller nodes
    # that bin-packing alone would pick first, but they hold only 3 replicas.
    nodes = [
        node("a0", labels={RACK: "r0"}),
        node("a1", labels={RACK: "r0"}),
        node("b0", labels={RACK: "r1"}),
        node("b1", labels={RACK: "r1"}),
    ]
    base = [running("r", "a", [("a0", (0, 1, 2, 3)), ("a1", (0, 1, 2, 3, 4))])]
    plan = place(nodes, [*base, job("gang", "a", gpu=4, replicas=4)])
    assert sorted(nodes_of(plan, "gang")) == ["b0", "b0", "b1", "b1"]


def test_multi_replica_jobs_share_a_node_when_they_can():
    nodes = [node("n1", gpus=8), node("n2", gpus=8)]
    plan = place(nodes, [job("pair", "a", gpu=4, replicas=2)], Policy(placement="spread"))
    assert len(set(nodes_of(plan, "pair"))) == 1


def test_pools_choose_their_own_placement_policy():
    nodes = [
        node("m1", gpus=4, labels={"pool": "main"}),
        node("m2", gpus=4, labels={"pool": "main"}),
        node("s1", gpus=4, labels={"pool": "spot"}),
        node("s2", gpus=4, labels={"pool": "spot"}),
    ]
    base = [running("rm", "a", [("m2", (0,))]), running("rs", "a", [("s2", (0,))])]
    policy = Policy(placement="binpack", pool_label="pool", pool_placement=(("spot", "spread"),))
    sel_main = labels_of({"pool": "main"})
    sel_spot = labels_of({"pool": "spot"})
    plan = place(
        nodes,
        [*base, job("jm", "a", gpu=1, node_selector=sel_main), job("js", "a", gpu=1, node_selector=sel_spot)],
        policy,
    )
    assert nodes_of(plan, "jm") == ["m2"]
    assert nodes_of(plan, "js") == ["s1"]


POLICIES = ["binpack", "spread", "fgd", "random", "dotprod", "clustering", "packing", "bestfit"]


@pytest.mark.parametrize("policy", POLICIES)
def test_every_placement_policy_is_selectable_and_deterministic(policy):
    nodes = [node(f"n{i}", gpus=4) for i in range(8)]
    jobs = [job(f"f{i}", "a", milli=300 + 100 * (i % 4), created=i) for i in range(10)] + [
        job(f"w{i}", "a", gpu=1 + i % 2, created=20 + i) for i in range(5)
    ]
    first = place(nodes, jobs, Policy(placement=policy, seed=3))
    again = place(nodes, jobs, Policy(placement=policy, seed=3))
    assert first == again
    assert len(first.admissions) == 15


def test_fgd_packs_fractions_to_keep_whole_gpus_free():
    # Typical mix: many 1-GPU jobs. A 0.5 GPU job should go next to the existing half, not onto a
    # fresh device, so that whole devices stay available.
    nodes = [node("n1", gpus=2), node("n2", gpus=2)]
    base = [running("half", "a", [("n1", (0,))], gpu_milli=500)]
    jobs = [*base, job("new-half", "a", milli=500)] + [
        job(f"w{i}", "a", gpu=1, created=10 + i, allowed_gpu_models=("none",)) for i in range(6)
    ]
    plan = place(nodes, jobs, Policy(placement="fgd"))
    placement = next(a for a in plan.admissions if a.workload_id == "new-half").placements[0]
    assert (placement.node, placement.gpu_indices) == ("n1", (0,))


def test_unknown_placement_policy_is_an_error():
    with pytest.raises(ValueError, match="unknown placement policy 'tetris'"):
        place([node("n1")], [job("j", "a", gpu=1)], Policy(placement="tetris"))


def test_random_depends_on_the_seed_only():
    nodes = [node(f"n{i}", gpus=8) for i in range(20)]
    jobs = [job(f"j{i}", "a", gpu=1, created=i) for i in range(10)]
    a = place(nodes, jobs, Policy(placement="random", seed=1))
    b = place(nodes, jobs, Policy(placement="random", seed=1))
    c = place(nodes, jobs, Policy(placement="random", seed=2))
    assert a == b
    assert a != c


def test_min_available_admits_as_many_replicas_as_fit_at_least_the_minimum():
    plan = place(
        [node("n1", gpus=4)],
        [job("elastic", "a", gpu=1, replicas=6, min_available=3)],
    )
    (admission,) = plan.admissions
    assert len(admission.placements) == 4


def test_gang_replicas_fill_a_node_before_moving_on():
    nodes = [node("n1", gpus=8), node("n2", gpus=8)]
    plan = place(nodes, [job("gang", "a", gpu=2, replicas=4)], Policy(placement="spread"))
    assert nodes_of(plan, "gang") == ["n1"] * 4


def test_a_gang_does_not_leave_its_rack_while_it_has_room():
    nodes = [node(f"r0-{i}", gpus=2, labels={RACK: "r0"}) for i in range(3)] + [
        node(f"r1-{i}", gpus=8, labels={RACK: "r1"}) for i in range(2)
    ]
    base = [running("busy", "a", [("r1-0", (0, 1, 2, 3, 4, 5))])]  # r1-0 is the fullest node
    plan = place(nodes, [*base, job("gang", "a", gpu=2, replicas=3)])
    racks = {n.split("-")[0] for n in nodes_of(plan, "gang")}
    assert len(racks) == 1


def test_a_foreign_pod_on_a_mig_device_blocks_its_slices():
    from scheduling.engine.model import ForeignUsage

    plan = place(
        [node("m1", gpus=2, mig=True)],
        [job(f"s{i}", "a", mig="7g.80gb", created=i) for i in range(2)],
        foreign=(ForeignUsage("m1", (0,), 1000),),
    )
    assert [(a.workload_id, a.placements[0].gpu_indices) for a in plan.admissions] == [("s0", (1,))]


# A job mix for the fragmentation-aware policies (cpu_milli, gpu_milli, gpu_count, allowed models).
_MIX = ((4000, 1000, 1, ()), (2000, 500, 1, ()), (2000, 250, 1, ()), (8000, 1000, 2, ()), (1000, 0, 0, ()))


@settings(max_examples=300, deadline=None)
@given(data=st.data(), placement=st.sampled_from(("binpack", "spread", "portal", "fgd")))
def test_the_fast_path_picks_the_node_the_scored_path_picks(data, placement):
    """``Votes.fast_pick`` (a masked argmax over the GPU model's block of nodes) forks the scored
    path for a single replica under binpack/spread, and ``Votes.block_pick`` (the same over the
    plugin's cached scores) under fgd/portal: the fast and scored paths choose the same node, and the
    same devices, on any load and shape (whole GPUs with the contiguity vote, fractions, CPU-only work
    with GPU avoidance)."""
    cluster = data.draw(loaded_clusters())
    shape = data.draw(shapes(cluster))
    workload = job("j", "a")
    fast = Placer(cluster, Policy(placement=placement), typical=_MIX)
    scored = Placer(cluster, Policy(placement=placement), typical=_MIX, fast_path=False)
    chosen = fast.choose_node(workload, shape)
    assert chosen == scored.choose_node(workload, shape)
    if chosen is not None and shape.kind == "fraction":
        assert fast.plugins[0].pick(cluster, chosen, shape, "j") == scored.plugins[0].pick(cluster, chosen, shape, "j")
    feasible = scored.feasible(shape, scored.eligible(workload, shape))
    assert (chosen is None) == (len(feasible) == 0)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), placement=st.sampled_from(("portal", "fgd", "binpack", "spread")))
def test_a_gangs_next_replica_goes_where_scoring_it_afresh_sends_it(data, placement):
    """A gang's next replica (no placement rules) takes its predecessor's candidates without the node
    the gang filled, and their raw scores and contiguity votes (``votes.Trail``), instead of measuring
    them again: the gang takes the same nodes and devices as with every replica scored afresh, on any
    load, racks, shape (not MIG), gang size and minimum."""
    cluster = data.draw(loaded_clusters(racks=True))
    shape = data.draw(shapes(cluster))
    wanted = data.draw(st.integers(2, 12))
    needed = data.draw(st.integers(1, wanted))
    workload = job("j", "a")

    def gang(placer: Placer) -> tuple[ReplicaPlacement, ...]:
        stmt = Statement(cluster)
        placements = placer.place_gang(workload, shape, stmt, wanted, needed, explain=False).placements
        stmt.discard()
        return placements

    trailed = Placer(cluster, Policy(placement=placement), typical=_MIX)
    afresh = Placer(cluster, Policy(placement=placement), typical=_MIX, fast_path=False)
    assert trailed.votes.trail() is not None
    assert afresh.votes.trail() is None
    assert gang(trailed) == gang(afresh)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_a_gangs_topology_vote_is_its_replicas_nearest_tier_as_the_gang_grows(data):
    """The topology vote of a gang's next replica, per candidate: 1 on a node a replica of the gang
    is on, else 0.6 in a rack of one, else 0.3 in a zone of one, else 0 (nodes without the label share
    no domain). Kept per gang as its list of nodes grows (``votes._GangTiers``): recomputed here from
    the nodes' labels after every node added, with a second gang placed in between."""
    # Racks and zones drawn apart, so a rack may span zones; some nodes lack one label or both.
    count = data.draw(st.integers(1, 14))
    labels = []
    for _ in range(count):
        drawn = {
            ZONE: data.draw(st.sampled_from(("", "z0", "z1"))),
            RACK: data.draw(st.sampled_from(("", "r0", "r1", "r2"))),
        }
        labels.append({key: value for key, value in drawn.items() if value})
    cluster = Cluster(Snapshot(tuple(node(f"n{i:02d}", labels=labels[i]) for i in range(count)), (), (), ()))
    shape = data.draw(shapes(cluster))
    votes = Placer(cluster, Policy()).votes
    every = np.arange(cluster.n)

    def rule(gang: list[int]) -> list[float]:
        def shares(j: int, key: str) -> bool:
            return key in labels[j] and any(labels[j][key] == labels[g].get(key) for g in gang)

        return [1.0 if j in gang else 0.6 if shares(j, RACK) else 0.3 if shares(j, ZONE) else 0.0 for j in every]

    nodes = st.integers(0, cluster.n - 1)
    first: list[int] = []
    for _ in range(data.draw(st.integers(1, 6))):
        first.append(data.draw(nodes))
        assert votes.topology(shape, every, first, 2).tolist() == rule(first)
        if data.draw(st.booleans()):  # another gang in between: its own tiers, from its own nodes
            other = [data.draw(nodes)]
            assert votes.topology(shape, every, other, 2).tolist() == rule(other)


def test_a_single_replica_that_fits_nowhere_is_searched_for_once_and_explained():
    # The one-step path of ``place_gang``: a miss is the answer (the same search again would miss again).
    cluster = Cluster(snapshot([node("a", gpus=2), node("b", gpus=2)], [], [], []))
    placer = Placer(cluster, Policy(placement="portal"))
    workload = job("j", "q", gpu=4)
    shape = placer.shape_for(workload, "A100-80GB")
    searched = []
    choose = placer.choose_node
    placer.choose_node = lambda *args, **kwargs: searched.append(1) or choose(*args, **kwargs)  # type: ignore[method-assign]
    result = placer.place_gang(workload, shape, Statement(cluster), 1, 1)
    assert result.placements == ()
    assert result.fit_count == 0
    assert len(searched) == 1
    assert result.explanation == placer.explain(workload, [shape])
    assert result.explanation.fit == 0
    assert dict(result.explanation.counts) == {"too few free GPUs": 2}
