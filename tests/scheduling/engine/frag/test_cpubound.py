"""portal's CPU-bound key (``frag/cpubound.py``), from the rule: while filling the free GPU of the GPU
nodes with the expected pods would need more CPU than those nodes have free, a sharing pod goes, among
the placements FGD's score and the tightest device tie, to the node with the most free GPU; otherwise
ties go by node order."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.engine.frag import Choice, NodeArrays, PodShape, TracePlacer, TypicalPod
from scheduling.engine.frag.cpubound import cpu_bound, cpu_per_gpu_milli

# Expected pods: half 0.5-GPU pods, half 1-GPU pods, 4 CPUs each: 4000 / 750 milli-CPU per milli-GPU.
TYPICAL = (
    TypicalPod(cpu_milli=4000, gpu_milli=500, gpu_count=1, allowed_models=(), frequency=0.5),
    TypicalPod(cpu_milli=4000, gpu_milli=1000, gpu_count=1, allowed_models=(), frequency=0.5),
)
SHARING = PodShape(cpu_milli=1000, memory_mib=0, gpu_milli=500, gpu_count=1)


def placer(rows: list[tuple[str, str | None, int, int, int]], policy: str = "portal") -> TracePlacer:
    return TracePlacer(
        NodeArrays.of(rows), policy, typical=TYPICAL, rng=np.random.default_rng(0), node_rank=np.arange(len(rows))
    )


def test_kappa_is_the_expected_cpu_per_gpu_milli():
    assert cpu_per_gpu_milli(TYPICAL) == pytest.approx(4000 / 750)
    cpu_only = TypicalPod(cpu_milli=8000, gpu_milli=0, gpu_count=0, allowed_models=(), frequency=0.5)
    half = TypicalPod(cpu_milli=2000, gpu_milli=1000, gpu_count=2, allowed_models=(), frequency=0.5)
    # (0.5 * 8000 + 0.5 * 2000) / (0.5 * 2000): CPU-only pods add CPU demand and no GPU.
    assert cpu_per_gpu_milli((cpu_only, half)) == pytest.approx(5.0)
    assert cpu_per_gpu_milli((cpu_only,)) == 0.0


def test_cpu_bound_compares_the_cpu_the_free_gpu_needs_with_the_free_cpu():
    # 6000 free GPU milli at 5 milli-CPU each need 30000.
    assert cpu_bound(5.0, 6000.0, 29999)
    assert not cpu_bound(5.0, 6000.0, 30000)  # exactly enough
    assert not cpu_bound(0.0, 6000.0, 0)  # no GPU demand expected


@settings(max_examples=30, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(("bind", "release", "sync")), st.integers(0, 2), st.integers(0, 4000)), max_size=30
    )
)
def test_the_kept_free_cpu_of_gpu_nodes_equals_a_recount(steps):
    p = placer([("a", "T4", 2, 40000, 65536), ("b", "T4", 4, 40000, 65536), ("cpu", None, 0, 90000, 65536)])
    bound = []
    for op, node, cpu in steps:
        pod = PodShape(cpu_milli=cpu, memory_mib=0, gpu_milli=0, gpu_count=0)
        if op == "bind" and p.cpu_free_milli[node] >= cpu:
            p.bind(pod, Choice(node, ()))
            bound.append((pod, node))
        elif op == "release" and bound:
            done, at = bound.pop()
            p.release(done, Choice(at, ()))
        elif op == "sync":
            p.sync_node(
                node,
                int(p.cpu_free_milli[node]) - cpu // 2,
                int(p.memory_free_mib[node]),
                p.gpu_free_milli[node].tolist(),
            )
        assert p._cpu_free_gpu_nodes == int(p.cpu_free_milli[0]) + int(p.cpu_free_milli[1])
    p.sync(np.array([0, 2]), np.array([123, 456]), p.memory_free_mib[[0, 2]], p.gpu_free_milli[[0, 2]])
    assert p._cpu_free_gpu_nodes == 123 + int(p.cpu_free_milli[1])


@pytest.mark.parametrize(
    ("small_cpu", "big_cpu", "expected"),
    [
        # Free GPU 6000 milli needs 6000 * 4000 / 750 = 32000 milli-CPU.
        (32000, 32000, 0),  # 64000 free: not CPU-bound, the tie goes to the first node
        (12000, 16000, 1),  # 28000 free: CPU-bound, the node with the most free GPU
    ],
)
def test_a_sharing_pod_goes_to_the_most_free_gpu_only_while_cpu_bound(small_cpu, big_cpu, expected):
    # A fresh device on either node leaves 500 milli: FGD's score and the tightest device tie.
    p = placer([("small", "T4", 2, small_cpu, 65536), ("big", "T4", 4, big_cpu, 65536)])
    fgd = placer([("small", "T4", 2, small_cpu, 65536), ("big", "T4", 4, big_cpu, 65536)], "fgd")
    fgd_scores, _ = fgd.score_nodes(SHARING, np.arange(2))
    assert fgd_scores[0] == fgd_scores[1]  # the premise: FGD cannot tell them apart
    choice = p.select(SHARING)
    assert choice is not None
    assert choice.node == expected


def test_cpu_only_nodes_do_not_count_as_free_cpu_for_gpus():
    rows = [("small", "T4", 2, 12000, 65536), ("big", "T4", 4, 16000, 65536), ("cpu", None, 0, 10**6, 65536)]
    choice = placer(rows).select(SHARING)
    assert choice is not None
    assert choice.node == 1


def test_a_tighter_device_still_comes_first_while_cpu_bound():
    p = placer([("small", "T4", 2, 12000, 65536), ("big", "T4", 4, 16000, 65536)])
    p.bind(SHARING, p.select(SHARING))  # CPU-bound: onto "big", one device half used
    p.bind(SHARING, choice := p.select(SHARING))
    # The half-used device (0 left after the pod) beats every fresh one, on whichever node it is.
    assert choice is not None
    assert choice.node == 1
    assert p.gpu_free_milli[1].min() == 0
