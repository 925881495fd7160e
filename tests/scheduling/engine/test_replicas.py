"""Rules between a job's replicas, each scenario worked out from Kubernetes' semantics (InterPodAffinity,
PodTopologySpread) and Kueue's required topology, then checked against the engine's plan."""

from __future__ import annotations

from collections import Counter

from scheduling.engine import model as m
from scheduling.engine.cycle import run_cycle
from scheduling.engine.model import AntiAffinityTerm, NodeSelectorTerm, PlacementRules, Requirement, SpreadConstraint

from .builders import RACK, ZONE, admitted_ids, cq, job, lq, node, pending_info, reason_of, running, snapshot

NOW = 1000.0
HOST = "kubernetes.io/hostname"
QUEUES = ([cq("q", {"A100-80GB": 1000, "H100-80GB": 1000})], [lq("a", "q")])
A100 = ("A100-80GB",)


def cycle(nodes, jobs, policy=None):
    return run_cycle(snapshot(nodes, *QUEUES, jobs), policy or m.Policy(), NOW)


def placed(plan, workload_id="j") -> list[str]:
    for a in plan.admissions:
        if a.workload_id == workload_id:
            return [p.node for p in a.placements]
    raise AssertionError(f"{workload_id} not admitted: {plan.pending}")


def zoned(zones: dict[str, int], gpus: int = 8, **labels: str) -> list:
    """``{"z1": 2}``: two nodes in zone z1, named z1-0, z1-1."""
    return [
        node(f"{zone}-{i}", gpus=gpus, labels={ZONE: zone, **labels})
        for zone, count in zones.items()
        for i in range(count)
    ]


def anti(key: str = HOST, weight: int = 0) -> PlacementRules:
    return PlacementRules(anti_affinity=(AntiAffinityTerm(key, weight),))


def spread(key: str = ZONE, max_skew: int = 1, when: str = "DoNotSchedule", **kwargs) -> PlacementRules:
    return PlacementRules(spread=(SpreadConstraint(max_skew, key, when, **kwargs),))


# -- pod anti-affinity ----------------------------------------------------------------------------


def test_required_anti_affinity_on_the_hostname_puts_each_replica_on_its_own_node():
    plan = cycle(zoned({"z1": 3}), [job("j", "a", gpu=1, replicas=3, rules=anti())])
    assert sorted(placed(plan)) == ["z1-0", "z1-1", "z1-2"]
    # Without the rule the gang fills one node.
    assert placed(cycle(zoned({"z1": 3}), [job("j", "a", gpu=1, replicas=3)])) == ["z1-0"] * 3


def test_one_replica_more_than_there_are_nodes_never_fits_and_says_why():
    plan = cycle(zoned({"z1": 3}), [job("j", "a", gpu=1, replicas=4, rules=anti(), allowed_gpu_models=A100)])
    assert admitted_ids(plan) == []
    assert reason_of(plan, "j") == (
        "gang: never fits as configured: all 4 replicas must start together with at most one per "
        "kubernetes.io/hostname (pod anti-affinity) and the A100-80GB nodes allow at most 3 of them"
    )


def test_when_a_node_is_busy_the_gang_waits_and_the_reason_names_the_anti_affinity():
    nodes = zoned({"z1": 4}, gpus=2)
    plan = cycle(nodes, [running("busy", "a", [("z1-3", (0, 1))]), job("j", "a", gpu=1, replicas=4, rules=anti())])
    info = pending_info(plan, "j")
    assert info.reason.message.startswith(
        "gang: only 3 of 4 replicas fit and all 4 must start together; next replica: 0 of 4 nodes fit: "
        "3 already hold a replica in their kubernetes.io/hostname (pod anti-affinity), 1 too few free GPUs"
    )
    assert info.reason.waits is True


def test_anti_affinity_by_zone_keeps_replicas_in_different_zones():
    plan = cycle(zoned({"z1": 2, "z2": 1}), [job("j", "a", gpu=1, replicas=2, rules=anti(ZONE))])
    assert sorted(n.split("-")[0] for n in placed(plan)) == ["z1", "z2"]
    three = cycle(zoned({"z1": 2, "z2": 1}), [job("j", "a", gpu=1, replicas=3, rules=anti(ZONE))])
    assert admitted_ids(three) == []


def test_nodes_without_the_topology_label_are_in_no_domain_and_never_conflict():
    # Kubernetes: anti-affinity counts only nodes that carry the topology key.
    plan = cycle([node("bare", gpus=8)], [job("j", "a", gpu=1, replicas=3, rules=anti(ZONE))])
    assert placed(plan) == ["bare"] * 3


def test_preferred_anti_affinity_spreads_replicas_while_it_can_and_packs_when_it_cannot():
    plan = cycle(zoned({"z1": 2}), [job("j", "a", gpu=1, replicas=2, rules=anti(weight=100))])
    assert sorted(placed(plan)) == ["z1-0", "z1-1"]
    plan = cycle(zoned({"z1": 2}), [job("j", "a", gpu=1, replicas=4, rules=anti(weight=100))])
    assert Counter(placed(plan)) == {"z1-0": 2, "z1-1": 2}


# -- topology spread (DoNotSchedule) --------------------------------------------------------------


def test_max_skew_one_over_three_zones_places_two_replicas_in_each():
    plan = cycle(zoned({"z1": 1, "z2": 1, "z3": 1}), [job("j", "a", gpu=1, replicas=6, rules=spread())])
    assert Counter(n.split("-")[0] for n in placed(plan)) == {"z1": 2, "z2": 2, "z3": 2}


def test_a_full_zone_still_counts_and_caps_the_others_at_max_skew():
    # z2 has no free GPU but is an eligible domain with 0 replicas, so z1 may hold at most maxSkew = 1.
    nodes = zoned({"z1": 1, "z2": 1}, gpus=4)
    full = running("full", "a", [("z2-0", (0, 1, 2, 3))])
    plan = cycle(nodes, [full, job("j", "a", gpu=1, replicas=2, rules=spread())])
    assert admitted_ids(plan) == []
    assert reason_of(plan, "j").startswith(
        "gang: only 1 of 2 replicas fit and all 2 must start together; next replica: 0 of 2 nodes fit: "
        "1 too few free GPUs, 1 would exceed the topology spread's maxSkew over topology.kubernetes.io/zone"
    )
    # maxSkew 2 allows both in z1.
    plan = cycle(nodes, [full, job("j", "a", gpu=1, replicas=2, rules=spread(max_skew=2))])
    assert placed(plan) == ["z1-0", "z1-0"]


def test_tainted_domains_count_unless_node_taints_policy_is_honor():
    nodes = [node("z1-0", labels={ZONE: "z1"}), node("z2-0", labels={ZONE: "z2"}, taints=(m.Taint("gpu", "t"),))]
    assert admitted_ids(cycle(nodes, [job("j", "a", gpu=1, replicas=2, rules=spread())])) == []
    honor = spread(node_taints_policy="Honor")
    assert placed(cycle(nodes, [job("j", "a", gpu=1, replicas=2, rules=honor)])) == ["z1-0", "z1-0"]


def test_domains_the_node_affinity_excludes_do_not_count_unless_node_affinity_policy_is_ignore():
    nodes = [node("z1-0", labels={ZONE: "z1", "pool": "a"}), node("z2-0", labels={ZONE: "z2", "pool": "b"})]
    only_a = (NodeSelectorTerm((Requirement("pool", "In", ("a",)),)),)
    honor = PlacementRules(required_terms=only_a, spread=(SpreadConstraint(1, ZONE),))
    assert placed(cycle(nodes, [job("j", "a", gpu=1, replicas=2, rules=honor)])) == ["z1-0", "z1-0"]
    ignore = PlacementRules(required_terms=only_a, spread=(SpreadConstraint(1, ZONE, node_affinity_policy="Ignore"),))
    assert admitted_ids(cycle(nodes, [job("j", "a", gpu=1, replicas=2, rules=ignore)])) == []


def test_fewer_domains_than_min_domains_make_the_global_minimum_zero():
    nodes = zoned({"z1": 1, "z2": 1})
    # Two domains: with minDomains 3 the minimum counts as 0, so each zone holds at most maxSkew = 1.
    plan = cycle(nodes, [job("j", "a", gpu=1, replicas=3, rules=spread(min_domains=3))])
    assert admitted_ids(plan) == []
    plan = cycle(nodes, [job("j", "a", gpu=1, replicas=2, rules=spread(min_domains=3))])
    assert sorted(placed(plan)) == ["z1-0", "z2-0"]
    # minDomains 2 is met: z1, z2, z1 is within skew 1.
    plan = cycle(nodes, [job("j", "a", gpu=1, replicas=3, rules=spread(min_domains=2))])
    assert sorted(placed(plan)) == ["z1-0", "z1-0", "z2-0"]


def test_nodes_without_a_do_not_schedule_label_are_not_candidates():
    nodes = [node("bare"), node("z1-0", labels={ZONE: "z1"})]
    plan = cycle(nodes, [job("j", "a", gpu=1, replicas=2, rules=spread(max_skew=2))])
    assert placed(plan) == ["z1-0", "z1-0"]
    plan = cycle([node("bare")], [job("j", "a", gpu=1, rules=spread(), allowed_gpu_models=A100)])
    assert reason_of(plan, "j") == (
        "placement: never fits as configured: none of the 1 A100-80GB node passes the job's filters: "
        "1 without the label topology.kubernetes.io/zone"
    )


def test_spread_over_hostnames_counts_every_node_as_a_domain():
    plan = cycle(zoned({"z1": 2}), [job("j", "a", gpu=1, replicas=4, rules=spread(HOST))])
    assert Counter(placed(plan)) == {"z1-0": 2, "z1-1": 2}


def test_schedule_anyway_prefers_the_emptier_domain_but_never_blocks():
    nodes = [*zoned({"z1": 2}), node("z2-0", gpus=1, labels={ZONE: "z2"})]
    plan = cycle(nodes, [job("j", "a", gpu=1, replicas=3, rules=spread(when="ScheduleAnyway"))])
    zones = Counter(n.split("-")[0] for n in placed(plan))
    assert zones == {"z1": 2, "z2": 1}
    # Nothing blocks: z2 cannot take more, the rest goes to z1.
    plan = cycle(nodes, [job("j", "a", gpu=1, replicas=5, rules=spread(when="ScheduleAnyway"))])
    assert Counter(n.split("-")[0] for n in placed(plan)) == {"z1": 4, "z2": 1}


# -- one domain (Kueue's required topology) -------------------------------------------------------


def racked(racks: dict[str, list[int]]) -> list:
    """``{"r1": [8, 8]}``: rack r1 with two 8-GPU nodes."""
    return [
        node(f"{rack}-{i}", gpus=g, labels={RACK: rack, ZONE: "z1"})
        for rack, sizes in racks.items()
        for i, g in enumerate(sizes)
    ]


def one(level: str) -> PlacementRules:
    return PlacementRules(required_topology=level)


def test_a_one_rack_gang_goes_to_a_rack_that_holds_all_of_it():
    nodes = racked({"r1": [8], "r2": [8, 8]})
    plan = cycle(nodes, [job("j", "a", gpu=4, replicas=4, rules=one("rack"))])
    assert sorted(placed(plan)) == ["r2-0", "r2-0", "r2-1", "r2-1"]


def test_among_racks_that_hold_the_gang_the_tightest_wins():
    nodes = racked({"r1": [8, 8, 8], "r2": [8, 8]})
    plan = cycle(nodes, [job("j", "a", gpu=8, replicas=2, rules=one("rack"))])
    assert sorted(placed(plan)) == ["r2-0", "r2-1"]


def test_a_gang_no_single_rack_can_hold_never_fits_though_the_cluster_could_hold_it():
    nodes = racked({"r1": [8, 4], "r2": [8]})
    plan = cycle(nodes, [job("j", "a", gpu=4, replicas=4, rules=one("rack"), allowed_gpu_models=A100)])
    assert admitted_ids(plan) == []
    assert reason_of(plan, "j") == (
        "gang: never fits as configured: all 4 replicas must start together in one rack "
        "(topology.kubernetes.io/rack) and the A100-80GB nodes of any one hold at most 3 of them with nothing "
        "else running"
    )
    # Without the hard rule the same gang spans both racks.
    assert admitted_ids(cycle(nodes, [job("j", "a", gpu=4, replicas=4)])) == ["j"]


def test_a_gang_whose_rack_is_busy_waits_and_says_how_many_one_rack_holds_now():
    nodes = racked({"r1": [8, 8], "r2": [8]})
    busy = running("busy", "a", [("r1-1", (0, 1, 2, 3))])
    plan = cycle(nodes, [busy, job("j", "a", gpu=4, replicas=4, rules=one("rack"))])
    info = pending_info(plan, "j")
    assert info.reason.message.startswith(
        "gang: only 3 of 4 replicas fit in one rack (topology.kubernetes.io/rack) and all 4 must start together "
        "in one rack (topology.kubernetes.io/rack); next replica: 0 of 3 nodes fit: 2 too few free GPUs, "
        "1 outside rack r1"
    )
    assert info.reason.waits is True


def test_one_node_and_one_zone_and_one_nvlink_domain():
    nodes = [
        node("a", gpus=8, labels={ZONE: "z1", "nvidia.com/gpu.clique": "c1"}),
        node("b", gpus=8, labels={ZONE: "z1", "nvidia.com/gpu.clique": "c2"}),
        node("c", gpus=8, labels={ZONE: "z2", "nvidia.com/gpu.clique": "c2"}),
    ]
    assert set(placed(cycle(nodes, [job("j", "a", gpu=2, replicas=4, rules=one("node"))]))) == {"a"}
    zones = {n[0] for n in placed(cycle(nodes, [job("j", "a", gpu=8, replicas=2, rules=one("zone"))]))}
    assert zones <= {"a", "b"}
    assert sorted(placed(cycle(nodes, [job("j", "a", gpu=8, replicas=2, rules=one("nvlink"))]))) == ["b", "c"]
    # Any node label works as the level.
    assert sorted(placed(cycle(nodes, [job("j", "a", gpu=8, replicas=2, rules=one(ZONE))]))) == ["a", "b"]


def test_nodes_without_the_level_label_are_not_used_by_a_one_domain_gang():
    nodes = [node("bare", gpus=8), node("r1-0", gpus=4, labels={RACK: "r1"})]
    plan = cycle(nodes, [job("j", "a", gpu=4, replicas=2, rules=one("rack"), allowed_gpu_models=A100)])
    assert reason_of(plan, "j") == (
        "gang: never fits as configured: all 2 replicas must start together and the 1 A100-80GB node that could "
        "run one hold at most 1 of them with nothing else running"
    )
    # The rack's node alone takes a one-replica job; the bare node never does.
    plan = cycle(nodes, [job("j", "a", gpu=4, rules=one("rack"))])
    assert placed(plan) == ["r1-0"]


def test_min_available_takes_the_rack_that_holds_the_most_replicas():
    nodes = racked({"r1": [8], "r2": [8, 4]})
    plan = cycle(nodes, [job("j", "a", gpu=4, replicas=4, min_available=2, rules=one("rack"))])
    assert sorted(placed(plan)) == ["r2-0", "r2-0", "r2-1"]


def test_one_domain_with_anti_affinity_inside_it():
    nodes = racked({"r1": [8, 8], "r2": [8, 8, 8]})
    rules = PlacementRules(anti_affinity=(AntiAffinityTerm(HOST),), required_topology="rack")
    plan = cycle(nodes, [job("j", "a", gpu=1, replicas=3, rules=rules)])
    assert sorted(placed(plan)) == ["r2-0", "r2-1", "r2-2"]
