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


def pack_rule(c):
    """``scorers.score_binpack``'s formula from the free arrays, node by node (an independent recomputation)."""
    gpu, cpu = [], []
    for i in range(c.n):
        total_gpu = max(int(c.gpu_count[i]) * int(c.dev_cap[i]), 1)
        cpu_share = int(c.cpu_free[i]) / max(int(c.cpu_total[i]), 1)
        gpu.append(-(int(c.gpu_free_total[i]) / total_gpu) - 0.01 * cpu_share)
        cpu.append(-cpu_share)
    return gpu, cpu


def test_bin_packing_scores_follow_every_change_when_read():
    # The scores of changed nodes are computed when next read: read between changes, after a discard,
    # and after a restore, they are the formula over the free capacity as it is then.
    c = cluster()
    stmt = Statement(c)
    for k, p in enumerate(PLACEMENTS):
        stmt.take(p)
        if k % 2:
            assert np.allclose(c.pack_score, pack_rule(c)[0], rtol=0, atol=1e-12)
    assert np.allclose(c.pack_score, pack_rule(c)[0], rtol=0, atol=1e-12)
    assert np.allclose(c.cpu_pack_score, pack_rule(c)[1], rtol=0, atol=1e-12)
    saved = c.save_free()
    changes = [(PLACEMENTS[0], -1), (PLACEMENTS[2], -1)]
    for p, sign in changes:
        c.apply(p, sign)
    c.restore_free(saved, changes)
    assert np.allclose(c.pack_score, pack_rule(c)[0], rtol=0, atol=1e-12)
    stmt.discard()
    assert np.allclose(c.pack_score, pack_rule(c)[0], rtol=0, atol=1e-12)
    assert np.allclose(c.cpu_pack_score, pack_rule(c)[1], rtol=0, atol=1e-12)
    assert c.pack_score.tolist() == cluster().pack_score.tolist()  # all free again: the fresh cluster's floats
    for k in range(12):  # more changes between two reads than are scored one by one
        name = ("n1", "n2", "cpu")[k % 3]
        devices = () if name == "cpu" else (k % 8,)
        c.apply(ReplicaPlacement(name, devices, 250 if devices else 0, cpu_milli=100, memory_mib=1), 1)
    assert np.allclose(c.pack_score, pack_rule(c)[0], rtol=0, atol=1e-12)
    assert np.allclose(c.cpu_pack_score, pack_rule(c)[1], rtol=0, atol=1e-12)


def test_a_bulk_take_of_placements_leaves_the_arrays_one_apply_each_leaves():
    # The running jobs' load (``holdings.load_running``): plain placements summed in array operations,
    # MIG slices and a plain holder of a MIG device one by one, a placement on an unknown node skipped.
    foreign_on_mig = ReplicaPlacement("m1", (1,), 500)
    placements = [*PLACEMENTS, PLACEMENTS[1], foreign_on_mig, ReplicaPlacement("gone", (0,), 1000, cpu_milli=5)]
    bulk, one_by_one = cluster(), cluster()
    heard: list[tuple[int, ReplicaPlacement, int]] = []
    bulk.listeners.append(lambda i, p, sign: heard.append((i, p, sign)))
    bulk.take_all(placements)
    for p in placements:
        one_by_one.apply(p, 1, refresh=False)
    bulk.refresh_all()
    one_by_one.refresh_all()
    assert state(bulk) == state(one_by_one)
    assert bulk.mem_free.tolist() == one_by_one.mem_free.tolist()
    assert heard == [(bulk.index[p.node], p, 1) for p in placements if p.node in bulk.index]


def test_the_bin_packing_scores_of_a_few_nodes_are_the_floats_the_array_holds():
    # ``Cluster.pack_scores_at`` computes them from the free arrays, without rescoring the stale nodes.
    c = cluster()
    for k, p in enumerate(PLACEMENTS):
        c.apply(p, 1)
        nodes = np.array([i for i in range(c.n) if (i + k) % 2 == 0])
        direct = (c.pack_scores_at(nodes, False).tolist(), c.pack_scores_at(nodes, True).tolist())
        assert direct == (c.pack_score[nodes].tolist(), c.cpu_pack_score[nodes].tolist())
