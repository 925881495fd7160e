"""Scarce capabilities (scheduling.engine.frag.scarcity) and portal's use of them, worked by hand from
the rule in the module docstring."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.engine.frag import Choice, NodeArrays, PodShape, TracePlacer, TypicalPod
from scheduling.engine.frag.scarcity import SCARCITY_SLACK, Scarcity, copies_of
from scheduling.engine.frag.workload import TypicalArrays, typical_pods

# Node 0 ("big"): 8 GPUs, 128 CPUs; node 1 ("small"): 8 GPUs, 96 CPUs, same model.
NODES = NodeArrays.of([("big", "G", 8, 128_000, 1 << 20), ("small", "G", 8, 96_000, 1 << 20)])


def _dense(found: tuple[np.ndarray, np.ndarray] | None, size: int) -> list[float]:
    """``Scarcity.penalty``'s answer as one penalty per candidate (0 where it names none)."""
    out = np.zeros(size)
    if found is not None:
        out[found[0]] = found[1]
    return out.tolist()


def test_copies_count_devices_cpu_and_models_together():
    shapes = (
        TypicalPod(120_000, 1000, 8, (), 0.25),  # 8 whole GPUs and 120 CPUs
        TypicalPod(10_000, 1000, 1, (), 0.25),  # whole GPU, 10 CPUs
        TypicalPod(3_000, 400, 1, (), 0.25),  # a 400-milli share, 3 CPUs
        TypicalPod(1_000, 1000, 1, ("H",), 0.25),  # a model this cluster does not have
    )
    table = TypicalArrays.build(shapes, ("G",))
    gpu = np.array([[1000] * 8, [1000] * 6 + [500, 300]])
    copies = copies_of(np.array([128_000, 96_000]), gpu, np.array([0, 0]), table)
    # big: one 8-GPU copy; 1-GPU: min(8 devices, 12 by CPU) = 8; 400 milli: 2 per device = 16, CPU 42;
    # small: no 8 whole devices; 1-GPU: min(6, 9) = 6; 400 milli: 6 * 2 + 1 (the 500) + 0 = 13, CPU 32.
    assert copies.tolist() == [[1, 8, 16, 0], [0, 6, 13, 0]]


def _workload(p_big: float) -> tuple[TypicalPod, ...]:
    """A rare 8-GPU, 120-CPU shape (only an empty "big" node holds it) and a common 1-GPU one."""
    return typical_pods(
        [(120_000, 1000, 8, ())] * round(1000 * p_big) + [(10_000, 1000, 1, ())] * round(1000 * (1 - p_big)),
        popularity=1.0,
    )


def test_need_and_weights_from_the_rule():
    # p = 0.04 / 0.96: mean request D = 0.04 * 8000 + 0.96 * 1000 = 1280 milli per pod; free 16000.
    # 8-GPU shape: 1 copy (big only): N = 0.04 / 1280 * 16000 / 1 = 0.5 -> E = 0.5 - slack.
    # 1-GPU shape: 8 (big: min(8, 12)) + 8 (small: min(8, 9)) = 16: N = 0.96 / 1280 * 16000 / 16 = 0.75.
    shapes = _workload(0.04)
    table = TypicalArrays.build(shapes, NODES.models)
    scarcity = Scarcity.build(table, 2)
    gpu = np.full((2, 8), 1000)
    state = (np.array([128_000, 96_000]), gpu, np.zeros(2, np.int64))
    ids = np.arange(2)  # two node states, one per node
    scarcity.refresh(ids, 0, [0, 1], state)
    order = [int(np.flatnonzero(table.num == n)[0]) for n in (8, 1)]
    assert scarcity.total[order].tolist() == [1, 16]
    excess = np.array([0.5, 0.75]) - SCARCITY_SLACK
    assert scarcity.weights(16_000.0)[order] == pytest.approx(excess / (1 + excess))
    # A 1-GPU pod on "big" takes its only 8-GPU copy; on "small" it takes nothing anyone needs whole.
    weight = scarcity.weights(16_000.0)
    found = scarcity.penalty(PodShape(10_000, 0, 1000, 1), np.arange(2), ids, np.zeros(2, np.int64), state, 16_000.0)
    assert _dense(found, 2) == pytest.approx([weight[order[0]], 0.0])


@pytest.mark.parametrize(("p_big", "fgd_pick", "portal_pick"), [(0.04, 0, 1), (0.005, 0, 0)])
def test_portal_keeps_the_only_home_of_a_rare_big_shape(p_big, fgd_pick, portal_pick):
    # FGD's typical pods (95 % of the pods) are the 1-GPU shape alone: on both empty nodes it fits before
    # and after, frag 0 -> 0, score int(100 * sigmoid(0)) = 50 on both; portal's stranded GPU is 0 before
    # and after on both; so node order decides (big first) unless scarcity says otherwise.
    # p = 0.04: N = 0.5 > slack: the 1-GPU pod leaves "big" whole. p = 0.005: D = 40 + 995 = 1035,
    # N = 0.005 / 1035 * 16000 = 0.077 <= slack (0.1): no weight, node order decides as in FGD.
    shapes = _workload(p_big)
    typical = typical_pods(
        [
            (t.cpu_milli, t.gpu_milli, t.gpu_count, t.allowed_models)
            for t in shapes
            for _ in range(round(1000 * t.frequency))
        ]
    )
    assert [(t.gpu_count, t.frequency) for t in typical] == [(1, 1.0)]
    pod = PodShape(10_000, 0, 1000, 1)
    picks = {}
    for policy in ("fgd", "portal"):
        placer = TracePlacer(NODES, policy, typical=typical, workload=shapes, node_rank=np.arange(2))
        choice = placer.select(pod)
        assert choice is not None
        picks[policy] = choice.node
    assert picks == {"fgd": fgd_pick, "portal": portal_pick}


def test_the_penalty_weighs_every_shape_a_placement_ends():
    # "big" already holds a 1-GPU pod (7 GPUs, 118 CPUs left: no 8-GPU copy); "small" is empty. Workload:
    # 1-GPU 0.5, 4-GPU 0.45, 8-GPU/90 CPUs 0.05: D = 500 + 1800 + 400 = 2700, free 15000.
    # 8-GPU: C = 1 (small), N = 0.05 / 2700 * 15000 = 0.278; 4-GPU: C = 1 (big) + 2 (small) = 3,
    # N = 0.45 / 2700 * 15000 / 3 = 0.833; 1-GPU: C = 7 + 8 = 15, N = 0.5 / 2700 * 15000 / 15 = 0.185.
    # A 4-GPU pod on big ends big's only 4-GPU copy (3 GPUs left): weight of the 4-GPU shape; on small
    # (4 GPUs, 86 CPUs left) it ends the 8-GPU copy only: the smaller weight, so portal picks small,
    # as FGD does (its typical 4-GPU shape no longer fits big afterwards: 18 against 50 points).
    typical = (TypicalPod(10_000, 1000, 1, (), 0.5), TypicalPod(10_000, 1000, 4, (), 0.5))
    workload = (*typical[:1], TypicalPod(10_000, 1000, 4, (), 0.45), TypicalPod(90_000, 1000, 8, (), 0.05))
    placer = TracePlacer(NODES, "portal", typical=typical, workload=workload, node_rank=np.arange(2))
    placer.place(PodShape(10_000, 0, 1000, 1))
    assert placer.cpu_free_milli[0] == 118_000  # node order: the first pod went to big
    scarcity = placer._scarcity
    assert scarcity is not None
    rows = np.zeros(2, np.int64)
    state = (placer.cpu_free_milli, placer.gpu_free_milli, rows)
    ids = np.arange(2)  # the two nodes are in different states now
    scarcity.refresh(ids, scarcity.epoch + 1, [], state)  # counted afresh, the bind included
    weight = scarcity.weights(15_000.0)
    need = {8: 0.05 / 2700 * 15000, 4: 0.45 / 2700 * 15000 / 3, 1: 0.5 / 2700 * 15000 / 15}
    for j, num in enumerate(scarcity.table.num.tolist()):
        excess = max(need[num] - SCARCITY_SLACK, 0.0)
        assert weight[j] == pytest.approx(excess / (1 + excess))
    found = scarcity.penalty(PodShape(10_000, 0, 1000, 4), np.arange(2), ids, np.zeros(2, np.int64), state, 15_000.0)
    by_num = dict(zip(scarcity.table.num.tolist(), weight.tolist(), strict=True))
    assert _dense(found, 2) == pytest.approx([by_num[4], by_num[8]])
    choice = placer.select(PodShape(10_000, 0, 1000, 4))
    assert choice is not None
    assert choice.node == 1


SHAPES = [
    PodShape(120_000, 0, 1000, 8),
    PodShape(10_000, 0, 1000, 1),
    PodShape(4_000, 0, 1000, 2),
    PodShape(3_000, 0, 400, 1),
    PodShape(2_000, 0, 810, 1),
    PodShape(8_000, 0, 0, 0),
]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(SHAPES) - 1), st.booleans()), min_size=1, max_size=40))
def test_kept_counts_and_penalties_equal_a_recount_from_the_rule(steps):
    # Three models' nodes, a workload of every shape above; binds and releases in any order. After each
    # step, C_s kept by state id equals copies_of summed over every node, and the penalty of every shape
    # on every feasible node equals the rule computed here: weights from that recount, a node's loss
    # = the shapes with copies now and none after the pod's devices and CPU are taken.
    nodes = NodeArrays.of(
        [("a", "G", 8, 128_000, 1 << 20), ("b", "G", 8, 96_000, 1 << 20), ("c", "H", 4, 64_000, 1 << 20)]
        + [(f"d{i}", "G", 2, 24_000, 1 << 20) for i in range(3)]
    )
    workload = typical_pods(
        [(s.cpu_milli, s.gpu_milli, s.gpu_count, ("H",) if s.gpu_count == 2 else ()) for s in SHAPES for _ in range(3)]
        + [(10_000, 1000, 1, ())] * 20,
        popularity=1.0,
    )
    placer = TracePlacer(nodes, "portal", typical=workload, workload=workload, node_rank=np.arange(len(nodes)))
    scarcity = placer._scarcity
    assert scarcity is not None
    bound: list[tuple[PodShape, Choice]] = []
    for which, release in steps:
        if release and bound:
            placer.release(*bound.pop(0))
        else:
            pod = SHAPES[which]
            choice = placer.place(pod)
            if choice is not None:
                bound.append((pod, choice))
        rows = placer._model_row
        recount = copies_of(placer.cpu_free_milli, placer.gpu_free_milli, rows, scarcity.table)
        for pod in SHAPES:
            idx = np.flatnonzero(placer.feasible(pod))
            if idx.size == 0:
                continue
            _, device = placer.score_nodes(pod, idx)  # refreshes the kept counts
            assert scarcity.total.tolist() == recount.sum(axis=0).tolist()
            free = float(np.maximum(placer.gpu_free_milli, 0).sum())
            need = scarcity.expected * free / np.maximum(recount.sum(axis=0), 1)
            excess = np.maximum(need - SCARCITY_SLACK, 0.0)
            weight = np.where(recount.sum(axis=0) > 0, excess / (1 + excess), 0.0)
            expected = []
            for n in idx.tolist():
                gpu = placer.gpu_free_milli[n].copy()
                if pod.is_sharing:
                    gpu[int(device[n])] -= pod.gpu_milli
                else:
                    gpu[np.flatnonzero(gpu >= 1000)[: pod.gpu_count]] -= pod.gpu_milli
                after = copies_of(
                    np.array([placer.cpu_free_milli[n] - pod.cpu_milli]), gpu[None, :], rows[n : n + 1], scarcity.table
                )[0]
                expected.append(float(((recount[n] > 0) & (after == 0)) @ weight))
            state = (placer.cpu_free_milli, placer.gpu_free_milli, rows)
            found = scarcity.penalty(pod, idx, placer._states.ids, device, state, free)
            assert _dense(found, idx.size) == pytest.approx(expected)
