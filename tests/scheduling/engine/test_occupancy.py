"""The cluster's occupancy against hand-built states; fragmentation worked out from the FGD paper's rule."""

from __future__ import annotations

import pytest

from scheduling.engine.model import ForeignUsage, NodePool, ReplicaPlacement, Resources, Workload, WorkloadState
from scheduling.engine.occupancy import FOREIGN, FREE, MIG, SHARED, WHOLE, cluster_occupancy
from tests.scheduling.engine.builders import cq, job, lq, node, running, snapshot


def _snap(nodes, workloads, **kwargs):
    return snapshot(nodes, [cq("a", {"A100-80GB": 16})], [lq("a", "a")], workloads, **kwargs)


def test_every_gpu_says_what_holds_it():
    mig = Workload(
        id="m",
        local_queue="a",
        team="a",
        priority=0,
        created_at=0.0,
        resources=Resources(mig_profile="3g.40gb"),
        state=WorkloadState.RUNNING,
        gpu_model="A100-80GB",
        placements=(ReplicaPlacement("n2", (0,), 0, "3g.40gb", 4),),
    )
    occ = cluster_occupancy(
        _snap(
            [node("n1", gpus=4), node("n2", gpus=1, mig=True)],
            [
                running("w", "a", [("n1", (0,))]),
                running("f1", "a", [("n1", (1,))], gpu_milli=250),
                running("f2", "a", [("n1", (1,))], gpu_milli=500),
                mig,
            ],
            foreign=(ForeignUsage("n1", (2,), 1000),),
            gpu_memory_gib=(("A100-80GB", 80),),
        )
    )
    n1, n2 = occ.nodes
    assert [d.state for d in n1.devices] == [WHOLE, SHARED, FOREIGN, FREE]
    assert n1.devices[1].used_milli == 750
    assert {(h.workload, h.milli) for h in n1.devices[1].holders} == {("f1", 250), ("f2", 500)}
    assert n1.workloads == ("f1", "f2", "w")
    (slice_,) = n2.devices[0].holders
    assert n2.devices[0].state == MIG
    assert (slice_.workload, slice_.mig_profile, slice_.mig_slot, slice_.milli) == ("m", "3g.40gb", 4, 500)


def test_per_model_totals_split_free_capacity_into_whole_gpus_fragments_and_cordoned():
    occ = cluster_occupancy(
        _snap(
            [node("n1", gpus=4), node("n2", gpus=2, cordoned=True), node("t", "T4", 2)],
            [running("w", "a", [("n1", (0,))]), running("f", "a", [("n1", (1,))], gpu_milli=300)],
        )
    )
    a100 = next(m for m in occ.models if m.gpu_model == "A100-80GB")
    assert (a100.nodes, a100.gpus) == (2, 6)
    assert a100.allocated_milli == 1300
    assert a100.free_whole == 2  # n1's devices 2 and 3; n2 is cordoned
    assert a100.free_fragment_milli == 700
    assert a100.cordoned_free_milli == 2000
    # Everything adds up to the GPUs there are.
    assert a100.allocated_milli + a100.free_whole * 1000 + a100.free_fragment_milli + a100.cordoned_free_milli == 6000


def test_fragmentation_is_fgds_expected_unusable_free_gpu_for_the_job_mix():
    # Job mix: the running 700-milli fraction and a pending 500-milli one, one replica each, so the
    # typical pods are {700: 1/2, 500: 1/2}. Node free: device 0 300 milli, device 1 1000.
    # For either pod device 1 fits, so only device 0's 300 is fragmented: 1/2*300 + 1/2*300 = 300.
    occ = cluster_occupancy(
        _snap(
            [node("n1", gpus=2, cpu=8000)],
            [running("r", "a", [("n1", (0,))], gpu_milli=700), job("p", "a", milli=500)],
        )
    )
    (a100,) = occ.models
    assert a100.fragmentation_milli == pytest.approx(300.0)
    assert a100.measured_free_milli == 1300


def test_a_node_whose_cpu_is_gone_counts_all_its_free_gpu_as_fragmented():
    # The running job takes all 8 cores: no typical pod (1 core each) can run, so all 1300 free milli count.
    occ = cluster_occupancy(
        _snap(
            [node("n1", gpus=2, cpu=8000)],
            [running("r", "a", [("n1", (0,))], gpu_milli=700, cpu=8000), job("p", "a", milli=500)],
        )
    )
    assert occ.models[0].fragmentation_milli == pytest.approx(1300.0)


def test_whole_gpu_jobs_see_every_partly_used_device_as_fragmented():
    # Mix: two 1-GPU jobs (running and pending). n1 has one whole free device: one 1-GPU pod fits, so
    # only the 600 milli left on device 0 count.
    occ = cluster_occupancy(
        _snap(
            [node("n1", gpus=2)],
            [running("f", "a", [("n1", (0,))], gpu_milli=400), job("p", "a", gpu=1), job("q", "a", gpu=1)],
        )
    )
    # Typical pods: (1000 x1): 2/3, (400 x1): 1/3. For 1000: device 0 (600) is too small -> 600.
    # For 400: both devices fit -> 0. Expected 2/3 * 600 = 400.
    assert occ.models[0].fragmentation_milli == pytest.approx(400.0)


def test_an_overcommitted_pool_gives_each_device_more_room_for_fractions():
    pool = NodePool("shared", (("pool", "shared"),), overcommit_ratio=1.5)
    occ = cluster_occupancy(
        _snap(
            [node("n1", gpus=1, labels={"pool": "shared"})],
            [running("f", "a", [("n1", (0,))], gpu_milli=900)],
            pools=(pool,),
        )
    )
    (n1,) = occ.nodes
    assert n1.pool == "shared"
    assert (n1.devices[0].capacity_milli, n1.devices[0].free_milli) == (1500, 600)
