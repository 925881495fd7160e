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
    return [
        c.full_free.tolist(),
        c.max_share.tolist(),
        c.gpu_free_total.tolist(),
        c.free_bits.tolist(),
        c.free_run.tolist(),
    ]


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
    assert incremental.free_run[i] == 5  # devices 3-7
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


def state(c):
    return [*summaries(c), c.dev_free.tolist(), c.mig_mask.tolist(), c.mig_compute.tolist(), c.cpu_free.tolist()]


def test_restoring_the_saved_free_capacity_undoes_every_change_and_tells_the_listeners_newest_first():
    # What the forecast does: changes after a save (a start after an end on the same MIG device
    # included), then the saved state back. Compared with a cluster that never saw the changes.
    untouched, c = cluster(), cluster()
    base = [PLACEMENTS[0], PLACEMENTS[3]]
    for p in base:
        untouched.apply(p, 1)
        c.apply(p, 1)
    heard: list[tuple[int, ReplicaPlacement, int]] = []
    c.listeners.append(lambda i, p, sign: heard.append((i, p, sign)))
    saved = c.save_free()
    changes = [(PLACEMENTS[3], -1), (PLACEMENTS[4], 1), (PLACEMENTS[1], 1), (PLACEMENTS[2], 1)]
    for p, sign in changes:
        c.apply(p, sign)
    assert state(c) != state(untouched)
    heard.clear()
    c.restore_free(saved, changes)
    assert state(c) == state(untouched)
    assert c.pack_score.tolist() == untouched.pack_score.tolist()
    assert heard == [(c.index[p.node], p, -sign) for p, sign in reversed(changes)]
