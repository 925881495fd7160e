"""Node pools: membership, per-pool placement, and fractional overcommit that never hands out more than
ratio × device while quota and billing count the requested shares."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.engine.cycle import run_cycle
from scheduling.engine.model import NodePool, Policy, labels_of
from scheduling.engine.pools import pool_index, share_capacity_milli
from scheduling.engine.shares import placement_billed_units

from .builders import admitted_ids, cq, job, lq, node, reason_of, running, snapshot

NOW = 1000.0
POOL = "pool"
SHARED = NodePool("shared", labels_of({POOL: "shared"}), overcommit_ratio=1.2)


def cycle(nodes, jobs, pools=(SHARED,), quota=100, policy=None):
    queues = ([cq("q", {"A100-80GB": quota})], [lq("a", "q")])
    return run_cycle(snapshot(nodes, *queues, jobs, pools=tuple(pools)), policy or Policy(), NOW)


def notebooks(count: int, milli: int = 240) -> list:
    return [job(f"nb{i:02d}", "a", milli=milli, created=i) for i in range(count)]


@pytest.mark.parametrize(
    ("labels", "expected"),
    [({POOL: "shared"}, 0), ({POOL: "shared", "x": "1"}, 0), ({POOL: "fast"}, 1), ({}, -1), ({POOL: "other"}, -1)],
)
def test_a_node_is_in_the_first_pool_whose_selector_it_matches(labels, expected):
    pools = (SHARED, NodePool("fast", labels_of({POOL: "fast"})), NodePool("all-shared", labels_of({POOL: "shared"})))
    assert pool_index(labels, pools) == expected


@pytest.mark.parametrize(("ratio", "milli"), [(1.0, 1000), (1.2, 1200), (1.25, 1250), (0.5, 1000), (9.0, 4000)])
def test_a_ratio_becomes_the_milli_gpu_fractions_may_share(ratio, milli):
    assert share_capacity_milli(ratio) == milli


def test_at_1_2_five_quarter_gpu_notebooks_share_one_device_and_a_sixth_waits():
    plan = cycle([node("n1", gpus=1, labels={POOL: "shared"})], notebooks(6))
    assert admitted_ids(plan) == ["nb00", "nb01", "nb02", "nb03", "nb04"]  # 5 × 240 = 1200 of 1200
    assert reason_of(plan, "nb05") == (
        "placement: 0 of 1 nodes fit: 1 no GPU with 0.24 free; needs 0.24 of one A100-80GB GPU; eligible nodes' "
        "GPUs have at most 0 free each and 0 in all (capacity in use)"
    )


def test_outside_the_pool_the_same_device_takes_four():
    plan = cycle([node("n1", gpus=1, labels={POOL: "plain"})], notebooks(5))
    assert len(plan.admissions) == 4  # 5 × 240 = 1200 > 1000


def test_quota_and_the_bill_count_the_requested_shares_not_the_overcommitted_capacity():
    # One GPU of quota: four 0.24 notebooks use 960 milli of it, a fifth would need 1200.
    plan = cycle([node("n1", gpus=1, labels={POOL: "shared"})], notebooks(5), quota=1)
    assert len(plan.admissions) == 4
    assert reason_of(plan, "nb04").startswith("quota: queue q uses 0.96 of 1 A100-80GB GPUs and needs 0.24 more")
    billed = sum(placement_billed_units(p) for a in plan.admissions for p in a.placements)
    assert billed == 4 * placement_billed_units(plan.admissions[0].placements[0])
    assert plan.admissions[0].placements[0].gpu_milli == 240


def test_a_whole_gpu_needs_a_device_nobody_holds_and_then_holds_all_of_it():
    shared = node("n1", gpus=2, labels={POOL: "shared"})
    nb = running("nb", "a", [("n1", (0,))], gpu_milli=200)
    plan = cycle([shared], [nb, job("whole", "a", gpu=1), *notebooks(6, milli=200)])
    whole = next(a for a in plan.admissions if a.workload_id == "whole")
    assert whole.placements[0].gpu_indices == (1,)
    # Device 0 holds nb + five more 0.2 notebooks (1200); device 1 is the whole GPU's alone.
    fractions = [a for a in plan.admissions if a.workload_id.startswith("nb")]
    assert [p.gpu_indices for a in fractions for p in a.placements] == [(0,)] * 5
    assert reason_of(plan, "nb05").startswith("placement: 0 of 1 nodes fit: 1 no GPU with 0.2 free;")


def test_a_pool_chooses_its_own_placement_policy():
    pools = (
        NodePool("packed", labels_of({POOL: "packed"}), placement="binpack"),
        NodePool("spread", labels_of({POOL: "spread"}), placement="spread"),
    )
    nodes = [node(f"{p}-{i}", gpus=8, labels={POOL: p}) for p in ("packed", "spread") for i in range(2)]
    busy = [running("b1", "a", [("packed-1", (0,))]), running("b2", "a", [("spread-1", (0,))])]
    for pool, expected in (("packed", "packed-1"), ("spread", "spread-0")):
        sel = labels_of({POOL: pool})
        plan = cycle(nodes, [*busy, job("j", "a", gpu=1, node_selector=sel)], pools=pools)
        assert [p.node for a in plan.admissions for p in a.placements] == [expected]


@settings(max_examples=60, deadline=None)
@given(
    ratio=st.sampled_from((1.0, 1.1, 1.2, 1.5, 2.0)),
    requests=st.lists(st.sampled_from((100, 240, 333, 500, 700, 999, 1000, 2000)), min_size=1, max_size=30),
    gpus=st.integers(1, 4),
)
def test_overcommit_never_hands_out_more_than_ratio_times_a_device(ratio, requests, gpus):
    pool = NodePool("p", labels_of({POOL: "p"}), overcommit_ratio=ratio)
    jobs = [
        job(f"j{i:02d}", "a", created=i, **({"gpu": r // 1000} if r >= 1000 else {"milli": r}))
        for i, r in enumerate(requests)
    ]
    plan = cycle([node("n1", gpus=gpus, labels={POOL: "p"})], jobs, pools=(pool,), quota=1000)
    # Recomputed from the rule: fractions on a device sum to at most floor(1000 × ratio); a device
    # with a whole GPU holds nothing else.
    cap = int(1000 * ratio + 1e-9)
    fractions: dict[int, int] = {}
    whole: dict[int, int] = {}
    for a in plan.admissions:
        for p in a.placements:
            for d in p.gpu_indices:
                if p.gpu_milli >= 1000:
                    whole[d] = whole.get(d, 0) + 1
                else:
                    fractions[d] = fractions.get(d, 0) + p.gpu_milli
    assert all(total <= cap for total in fractions.values())
    assert all(count == 1 and d not in fractions for d, count in whole.items())


@pytest.mark.parametrize("placement", ["fgd", "portal", "bestfit", "packing"])
def test_fragmentation_aware_pools_honour_the_overcommit_cap(placement):
    pool = NodePool("p", labels_of({POOL: "p"}), placement=placement, overcommit_ratio=1.2)
    nodes = [node("n1", gpus=2, labels={POOL: "p"})]
    plan = cycle(nodes, [job("w", "a", gpu=1), *notebooks(7)], pools=(pool,))
    per_device: dict[int, int] = {}
    for a in plan.admissions:
        for p in a.placements:
            for d in p.gpu_indices:
                per_device[d] = per_device.get(d, 0) + (1200 if p.gpu_milli >= 1000 else p.gpu_milli)
    # One device for the whole GPU, five 0.24 notebooks on the other; the last two wait.
    assert sorted(per_device.values()) == [1200, 1200]
    assert len(plan.admissions) == 6
