"""Free-capacity bookkeeping: bulk loading, incremental updates and staged changes agree."""

from __future__ import annotations

import numpy as np

from scheduling.engine.capacity import Cluster, Statement
from scheduling.engine.model import ReplicaPlacement

from .builders import cq, lq, node, snapshot

PLACEMENTS = [
    ReplicaPlacement("n1", (0, 1), 1000, cpu_milli=1000, memory_mib=10),
    ReplicaPlacement("n1", (2,), 300),
    ReplicaPlacement("n2", (5,), 700),
    ReplicaPlacement("m1", (0,), 0, "3g.40gb", 4),
    ReplicaPlacement("m1", (1,), 0, "1g.10gb", 2),
]


def cluster():
    return Cluster(
        snapshot(
            [node("n1"), node("n2", "H100-80GB"), node("m1", mig=True, gpus=2), node("cpu", None)],
            [cq("q")],
            [lq("a", "q")],
            [],
        )
    )


def summaries(c):
    return [c.full_free.tolist(), c.max_share.tolist(), c.gpu_free_total.tolist(), c.free_bits.tolist()]


def test_bulk_load_then_refresh_all_equals_incremental_updates():
    bulk, incremental = cluster(), cluster()
    for p in PLACEMENTS:
        bulk.apply(p, 1, refresh=False)
        incremental.apply(p, 1)
    bulk.refresh_all()
    assert summaries(bulk) == summaries(incremental)
    i = incremental.index["n1"]
    assert incremental.full_free[i] == 5
    assert incremental.free_bits[i] == 0b11111000
    assert incremental.gpu_free_total[incremental.index["m1"]] == 2000 - 500 - 125  # 4 and 1 of 16 memory slices


def test_discarding_a_statement_restores_everything():
    c = cluster()
    before = [*summaries(c), c.dev_free.tolist(), c.mig_mask.tolist(), c.cpu_free.tolist()]
    stmt = Statement(c)
    for p in PLACEMENTS:
        stmt.take(p)
    assert not np.array_equal(c.dev_free, np.array(before[4]))
    stmt.discard()
    assert [*summaries(c), c.dev_free.tolist(), c.mig_mask.tolist(), c.cpu_free.tolist()] == before


def test_each_gpu_model_is_one_contiguous_slice():
    c = cluster()
    for model, (lo, hi) in c.model_slice.items():
        assert all(c.nodes[i].gpu_model == model for i in range(lo, hi))
    assert c.nodes[-1].gpu_model is None
