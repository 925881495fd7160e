"""The capacity signal: how many new nodes of which pool would let a job waiting for capacity start.

Expected figures are worked out by hand from the nodes' sizes (GPUs, CPU, memory per node)."""

from __future__ import annotations

import pytest

from scheduling.engine.cycle import run_cycle
from scheduling.engine.model import NodePool, PlacementRules, Policy, Taint, Toleration
from scheduling.engine.provisioning import capacity_requests, templates, with_capacity_requests
from tests.scheduling.engine.builders import cq, job, lq, node, pending_info, running, snapshot

POLICY = Policy()
POOLS = (NodePool("training", (("pool", "training"),)), NodePool("inference", (("pool", "inference"),)))
BIG = {"A100-80GB": 1000, "T4": 1000}


def world(workloads, nodes=None, **kwargs):
    nodes = nodes or [
        node("a100-0", gpus=8, labels={"pool": "training"}),
        node("t4-0", "T4", gpus=4, cpu=32_000, mem=128_000, labels={"pool": "inference"}),
    ]
    return snapshot(nodes, [cq("cq", BIG)], [lq("q", "cq")], workloads, pools=POOLS, **kwargs)


def requests_of(snap):
    plan = run_cycle(snap, POLICY, 100.0)
    return plan, {r.workload_id: r for r in capacity_requests(snap, plan, POLICY)}


BUSY = running("busy", "q", [("a100-0", tuple(range(8)))])


@pytest.mark.parametrize(
    ("replicas", "gpu", "cpu", "nodes"),
    [
        (1, 8, 1000, 1),  # one whole node
        (3, 8, 1000, 3),  # a node per replica
        (4, 4, 1000, 2),  # two replicas of 4 GPUs per 8-GPU node
        (5, 2, 1000, 2),  # four per node: ceil(5 / 4)
        (4, 1, 40_000, 4),  # CPU binds: one 40-core replica per 64-core node
    ],
)
def test_a_gang_waiting_for_a100s_asks_for_enough_training_nodes(replicas, gpu, cpu, nodes):
    waiting = job("j", "q", gpu=gpu, cpu=cpu, replicas=replicas, allowed_gpu_models=("A100-80GB",))
    plan, requests = requests_of(world([BUSY, waiting]))
    assert pending_info(plan, "j").reason.kind in ("placement", "gang")
    request = requests["j"]
    assert (request.pool, request.gpu_model, request.template, request.nodes) == (
        "training",
        "A100-80GB",
        "a100-0",
        nodes,
    )


def test_a_job_that_waits_for_quota_asks_for_no_node():
    snap = snapshot([node("a100-0", gpus=8)], [cq("cq", {"A100-80GB": 2})], [lq("q", "cq")], [job("j", "q", gpu=4)])
    plan, requests = requests_of(snap)
    assert pending_info(plan, "j").reason.kind == "quota"
    assert requests == {}


def test_a_replica_bigger_than_every_node_shape_asks_for_no_node():
    plan, requests = requests_of(world([job("j", "q", gpu=16, allowed_gpu_models=("A100-80GB",))]))
    assert pending_info(plan, "j").reason.waits is False
    assert requests == {}


def test_a_gang_bigger_than_todays_cluster_asks_for_the_nodes_it_needs_in_all():
    plan, requests = requests_of(world([job("j", "q", gpu=8, replicas=3, allowed_gpu_models=("A100-80GB",))]))
    assert pending_info(plan, "j").reason.waits is False  # never on today's nodes...
    assert requests["j"].nodes == 3  # ...but three new 8-GPU nodes hold it


def test_the_pool_needing_fewest_nodes_wins_and_taints_count():
    tainted = node("a100-spot", gpus=8, labels={"pool": "spot"}, taints=(Taint("spot", "true"),))
    pools = (*POOLS, NodePool("spot", (("pool", "spot"),)))
    nodes = [node("a100-0", gpus=8, labels={"pool": "training"}), tainted]
    busy_spot = running("busy2", "q", [("a100-spot", tuple(range(8)))])
    plain = job("plain", "q", gpu=8, allowed_gpu_models=("A100-80GB",))
    tolerant = job("tolerant", "q", gpu=8, tolerations=(Toleration("spot", "Exists"),), created=1.0)
    snap = snapshot(nodes, [cq("cq", BIG)], [lq("q", "cq")], [BUSY, busy_spot, plain, tolerant], pools=pools)
    _, requests = requests_of(snap)
    assert requests["plain"].pool == "training"  # it does not tolerate the spot pool's taint
    assert requests["tolerant"].pool == "training"  # both pools need one node: pool order breaks the tie


def test_a_one_node_gang_bigger_than_any_node_shape_asks_for_nothing():
    rules = PlacementRules(required_topology="node")
    # 2 x 8 GPUs must share one node, but nodes have 8: never fits, so no request either.
    _, requests = requests_of(world([BUSY, job("j", "q", gpu=8, replicas=2, rules=rules)]))
    assert "j" not in requests


def test_required_anti_affinity_between_replicas_asks_for_a_node_each():
    from scheduling.engine.model import AntiAffinityTerm

    rules = PlacementRules(anti_affinity=(AntiAffinityTerm("kubernetes.io/hostname"),))
    waiting = job("j", "q", gpu=1, replicas=3, rules=rules, allowed_gpu_models=("A100-80GB",))
    nodes = [node("a100-0", gpus=8, labels={"pool": "training", "kubernetes.io/hostname": "a100-0"})]
    snap = snapshot(nodes, [cq("cq", BIG)], [lq("q", "cq")], [BUSY, waiting], pools=POOLS)
    _, requests = requests_of(snap)
    assert requests["j"].nodes == 3


def test_the_request_is_written_into_the_pending_reason():
    waiting = job("j", "q", gpu=8, replicas=2, allowed_gpu_models=("A100-80GB",))
    snap = world([BUSY, waiting])
    plan = run_cycle(snap, POLICY, 100.0)
    plan = with_capacity_requests(plan, capacity_requests(snap, plan, POLICY))
    reason = pending_info(plan, "j").reason
    details = dict(reason.details)
    assert (details["provision_pool"], details["provision_gpu_model"], details["provision_nodes"]) == (
        "training",
        "A100-80GB",
        2,
    )
    assert reason.message.endswith("2 more A100-80GB nodes of pool training (like a100-0) would let it start")


def test_templates_take_each_pools_biggest_node_per_model():
    nodes = [
        node("a", gpus=4, labels={"pool": "training"}),
        node("b", gpus=8, labels={"pool": "training"}),
        node("c", "T4", gpus=4),
    ]
    snap = snapshot(nodes, [], [], [], pools=POOLS)
    assert [(t.pool, t.node.name) for t in templates(snap)] == [("training", "b"), ("", "c")]
