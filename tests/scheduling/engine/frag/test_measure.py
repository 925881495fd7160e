"""FGD's fragmentation measure (scheduling.engine.frag.measure) against a port of the reference simulator."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.engine import frag
from scheduling.engine.frag import NodeArrays, TypicalPod, measure, typical_pods
from scheduling.engine.frag.workload import TypicalArrays


# --------------------------------------------------------------------- reference (Go) fragmentation
def go_node_frag(cpu_left: int, gpu_left: list[int], gpu_type: str, typical: tuple[TypicalPod, ...]) -> float:
    """Line-by-line port of NodeGpuShareFragAmount(...).FragAmountSumExceptQ3() from the paper's simulator."""
    total = 0.0
    left_total = sum(gpu_left)
    for t in typical:
        if t.gpu_milli == 0:
            total += t.frequency * left_total  # XL / XR: all idle GPU counts
            continue
        if t.allowed_models and gpu_type not in t.allowed_models:
            total += t.frequency * left_total  # no access
            continue
        fits = sum(1 for g in gpu_left if g >= t.gpu_milli)
        if fits >= t.gpu_count and cpu_left >= t.cpu_milli:  # Q3: only too-small devices are fragments
            total += t.frequency * sum(g for g in gpu_left if g < t.gpu_milli)
        else:  # Q1, Q2, Q4
            total += t.frequency * left_total
    return total


typical_strategy = st.lists(
    st.tuples(
        st.sampled_from((0, 1000, 4000, 12000)),
        st.sampled_from((0, 200, 470, 810, 1000)),
        st.sampled_from((1, 2, 4)),
        st.sampled_from(((), ("A",), ("B",))),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=60, deadline=None)
@given(
    rows=typical_strategy,
    gpu_left=st.lists(st.sampled_from((0, 30, 190, 470, 530, 1000)), min_size=1, max_size=8),
    cpu_left=st.integers(0, 16000),
    model=st.sampled_from(("A", "B")),
)
def test_fragmentation_matches_the_reference_simulator(rows, gpu_left, cpu_left, model):
    shapes = [(cpu, milli, num if milli == 1000 else (1 if milli else 0), models) for cpu, milli, num, models in rows]
    typical = typical_pods(shapes, popularity=1.0)
    nodes = NodeArrays.of([("n", model, len(gpu_left), 16000, 1024), ("other", "A" if model == "B" else "B", 1, 1, 1)])
    gpu = np.full((2, nodes.max_gpus), -1, dtype=np.int64)
    gpu[0, : len(gpu_left)] = gpu_left
    gpu[1, 0] = 0
    ours = frag.fragmentation_milli(nodes, gpu, np.array([cpu_left, 0]), typical)
    assert ours == pytest.approx(go_node_frag(cpu_left, gpu_left, model, typical), abs=1e-6)


# ------------------------------------------------------------ a node's measure is the node's alone
@settings(max_examples=60, deadline=None)
@given(
    rows=typical_strategy,
    states=st.lists(
        st.tuples(
            st.integers(0, 16000),
            st.lists(st.sampled_from((-1, 0, 30, 190, 250, 470, 530, 1000)), min_size=4, max_size=4),
            st.integers(0, 2),
        ),
        min_size=1,
        max_size=40,
    ),
    split=st.integers(1, 40),
)
def test_a_node_measures_the_same_whatever_nodes_are_measured_with_it(rows, states, split):
    """Rule: a node's fragmentation and stranded GPU depend on that node's state only, so measuring it
    alone, in a batch of any size, or without arrays (computed or recalled for a state met before)
    gives the very same float (a decision never depends on which nodes happened to be measured
    together)."""
    shapes = [(cpu, milli, num if milli == 1000 else (1 if milli else 0), models) for cpu, milli, num, models in rows]
    tp = TypicalArrays.build(typical_pods(shapes, popularity=1.0), ("A", "B"))
    table = measure.TypicalRows.of(tp)
    cpu = np.array([s[0] for s in states], dtype=np.int64)
    gpu = np.array([s[1] for s in states], dtype=np.int64)
    model_row = np.array([s[2] for s in states], dtype=np.int64)
    whole = measure.frag_and_stranded(cpu, gpu, model_row, tp)
    fgd_only = measure.frag_milli(cpu, gpu, model_row, tp)
    stranded_only = measure.stranded_milli(cpu, gpu, model_row, tp)
    parts = [slice(0, split), slice(split, None)]
    memo = measure.NodeMeasures(table)  # recalls a state met before (states repeat in this draw)
    for k in range(len(states)):
        one = slice(k, k + 1)
        alone = measure.frag_and_stranded(cpu[one], gpu[one], model_row[one], tp)
        scalar = measure.node_frag_and_stranded(int(cpu[k]), gpu[k].tolist(), int(model_row[k]), table)
        assert (alone[0][0], alone[1][0]) == (whole[0][k], whole[1][k]) == scalar
        assert memo(int(cpu[k]), gpu[k].tolist(), int(model_row[k])) == scalar
        assert fgd_only[k] == whole[0][k]
        assert stranded_only[k] == whole[1][k]
    for part in parts:
        if len(cpu[part]):
            frag_part, stranded_part = measure.frag_and_stranded(cpu[part], gpu[part], model_row[part], tp)
            assert frag_part.tolist() == whole[0][part].tolist()
            assert stranded_part.tolist() == whole[1][part].tolist()


@settings(max_examples=200, deadline=None)
@given(delta=st.floats(-60_000, 60_000, allow_nan=False))
def test_the_one_number_sigmoid_score_equals_the_array_one(delta):
    assert measure.node_sigmoid_score(delta) == measure.sigmoid_score(np.array([delta, 0.0]))[0]


def test_a_state_is_recalled_only_for_the_same_model_row_cpu_and_devices():
    """``NodeMeasures`` recalls what it computed for the very same state: a GPU model row that typical
    pods may not use (they name the other model) measures differently, and so do other free CPU or
    devices."""
    tp = TypicalArrays.build(typical_pods([(1000, 1000, 1, ("A",)), (1000, 500, 1, ())], popularity=1.0), ("A", "B"))
    table = measure.TypicalRows.of(tp)
    memo = measure.NodeMeasures(table)
    states = [(8000, [1000, 500], 0), (8000, [1000, 500], 1), (500, [1000, 500], 0), (8000, [500, 1000], 0)]
    for cpu, gpu, row in states + states:
        assert memo(cpu, gpu, row) == measure.node_frag_and_stranded(cpu, gpu, row, table)
    assert len({measure.node_frag_and_stranded(cpu, gpu, row, table) for cpu, gpu, row in states[:3]}) == 3
