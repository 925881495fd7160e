"""The trace simulator's placement (scheduling.engine.frag.TracePlacer over NodeScorer): the paper's
policies in scenarios, invariants, score caches, and the package's imports."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.engine import frag
from scheduling.engine.frag import POLICIES, Choice, NodeArrays, PodShape, TracePlacer, TypicalPod, typical_pods

SHARE = TypicalPod(cpu_milli=1000, gpu_milli=500, gpu_count=1, allowed_models=(), frequency=0.5)
WHOLE = TypicalPod(cpu_milli=1000, gpu_milli=1000, gpu_count=1, allowed_models=(), frequency=0.5)


def nodes_of(*rows: tuple[str, str | None, int, int, int]) -> NodeArrays:
    return NodeArrays.of(rows)


def placer(nodes: NodeArrays, policy: str, typical: tuple[TypicalPod, ...] = (SHARE, WHOLE)) -> TracePlacer:
    return TracePlacer(nodes, policy, typical=typical, rng=np.random.default_rng(1), node_rank=np.arange(len(nodes)))


# --------------------------------------------------------------------------------------- scenarios
def test_fgd_puts_a_sharing_pod_on_the_half_used_device_it_completes():
    nodes = nodes_of(("empty", "T4", 2, 32000, 65536), ("half", "T4", 2, 32000, 65536))
    p = placer(nodes, "fgd")
    p.bind(PodShape(1000, 0, 500, 1), Choice(1, (1,)))
    choice = p.select(PodShape(1000, 0, 500, 1))
    assert choice is not None
    assert (choice.node, choice.gpu_indices) == (1, (1,))


def test_packing_prefers_a_shared_gpu_over_a_free_node():
    nodes = nodes_of(("free", "T4", 2, 32000, 65536), ("used", "T4", 2, 32000, 65536))
    p = placer(nodes, "packing")
    p.bind(PodShape(1000, 0, 300, 1), Choice(1, (0,)))
    choice = p.select(PodShape(1000, 0, 300, 1))
    assert choice is not None
    assert (choice.node, choice.gpu_indices) == (1, (0,))


def test_bestfit_picks_the_node_with_the_least_capacity_left():
    nodes = nodes_of(("big", "T4", 8, 64000, 65536), ("small", "T4", 2, 16000, 65536))
    choice = placer(nodes, "bestfit").select(PodShape(1000, 0, 1000, 1))
    assert choice is not None
    assert choice.node == 1


def test_clustering_groups_pods_of_the_same_gpu_count():
    nodes = nodes_of(("a", "T4", 8, 64000, 65536), ("b", "T4", 8, 64000, 65536))
    p = placer(nodes, "clustering")
    p.bind(PodShape(1000, 0, 500, 1), Choice(0, (0,)))
    p.bind(PodShape(1000, 0, 1000, 2), Choice(1, (0, 1)))
    choice = p.select(PodShape(1000, 0, 1000, 2))
    assert choice is not None
    assert choice.node == 1


def test_dotprod_prefers_the_node_whose_free_vector_is_least_aligned():
    nodes = nodes_of(("cpu-rich", "T4", 2, 64000, 65536), ("cpu-poor", "T4", 2, 4000, 65536))
    choice = placer(nodes, "dotprod").select(PodShape(4000, 0, 1000, 1))
    assert choice is not None
    assert choice.node == 1


def test_a_pod_restricted_to_gpu_models_only_lands_on_those_models():
    nodes = nodes_of(("a10", "A10", 8, 64000, 65536), ("t4", "T4", 1, 8000, 65536))
    for policy in POLICIES:
        choice = placer(nodes, policy).select(PodShape(1000, 0, 1000, 1, ("A10",)))
        assert choice is not None
        assert choice.node == 0, policy


def test_no_node_fits_returns_none():
    nodes = nodes_of(("t4", "T4", 2, 8000, 1024))
    p = placer(nodes, "fgd")
    assert p.select(PodShape(1000, 0, 1000, 4)) is None  # too few devices
    assert p.select(PodShape(9000, 0, 0, 0)) is None  # CPU
    assert p.select(PodShape(1000, 2048, 0, 0)) is None  # memory
    assert p.select(PodShape(1000, 0, 1000, 1, ("A10",))) is None  # model


def test_ties_go_to_the_first_node_in_the_given_order():
    nodes = nodes_of(*[(f"n{i}", "T4", 2, 32000, 65536) for i in range(5)])
    p = TracePlacer(nodes, "bestfit", rng=np.random.default_rng(0), node_rank=np.array([3, 1, 4, 0, 2]))
    choice = p.select(PodShape(1000, 0, 1000, 1))
    assert choice is not None
    assert choice.node == 3


# --------------------------------------------------------------------------------------- invariants
pod_strategy = st.builds(
    lambda cpu, mem, kind, models: PodShape(cpu, mem, kind[0], kind[1], models),
    st.sampled_from((500, 2000, 8000)),
    st.sampled_from((512, 4096, 32768)),
    st.sampled_from(((0, 0), (250, 1), (470, 1), (810, 1), (1000, 1), (1000, 2), (1000, 4), (1000, 8))),
    st.sampled_from(((), ("T4",), ("A10", "V100"))),
)


@settings(max_examples=20, deadline=None)
@given(
    policy=st.sampled_from(POLICIES),
    pods=st.lists(pod_strategy, min_size=1, max_size=40),
    releases=st.lists(st.integers(0, 59), max_size=20),
)
def test_no_device_cpu_or_memory_is_ever_over_committed(policy, pods, releases):
    nodes = nodes_of(("a", "T4", 2, 16000, 65536), ("b", "A10", 8, 64000, 131072), ("c", "V100", 4, 8000, 65536))
    p = placer(nodes, policy, typical_pods([(1000, 500, 1, ()), (1000, 1000, 1, ())]))
    placed: list[tuple[PodShape, Choice]] = []
    for i, pod in enumerate(pods):
        before = p.gpu_free_milli.copy()
        choice = p.place(pod)
        if choice is not None:
            placed.append((pod, choice))
            assert len(choice.gpu_indices) == pod.gpu_count
            assert len(set(choice.gpu_indices)) == pod.gpu_count  # distinct devices, one node
            if pod.gpu_count > 1 or pod.gpu_milli == 1000:
                assert all(before[choice.node, d] == 1000 for d in choice.gpu_indices)  # whole devices
            if pod.allowed_models and pod.gpu_count:
                assert nodes.models[nodes.model_ids[choice.node]] in pod.allowed_models
        if i in releases and placed:
            p.release(*placed.pop(0))
        assert (p.gpu_free_milli[p.gpu_free_milli != -1] >= 0).all()
        assert (p.cpu_free_milli >= 0).all()
        assert (p.memory_free_mib >= 0).all()
    for pod, choice in placed:
        p.release(pod, choice)
    fresh = placer(nodes, policy)
    assert (p.gpu_free_milli == fresh.gpu_free_milli).all()
    assert (p.cpu_free_milli == fresh.cpu_free_milli).all()
    assert p.frag_milli() == pytest.approx(TracePlacer(nodes, policy, typical=p.typical).frag_milli(), abs=1e-6)


@settings(max_examples=25, deadline=None)
@given(policy=st.sampled_from(("fgd", "portal")), pods=st.lists(pod_strategy, min_size=2, max_size=25))
def test_cached_scores_choose_like_a_fresh_placer(policy, pods):
    """Score caches (per shape, per node version) never change a decision."""
    nodes = nodes_of(("a", "T4", 2, 16000, 65536), ("b", "A10", 8, 64000, 131072), ("c", "V100", 4, 32000, 65536))
    typical = typical_pods(
        [(1000, 500, 1, ()), (2000, 1000, 1, ("T4",)), (8000, 1000, 4, ()), (4000, 0, 0, ()), (1000, 250, 1, ("A10",))]
    )
    live = placer(nodes, policy, typical)
    history: list[tuple[PodShape, Choice]] = []
    for pod in pods:
        fresh = placer(nodes, policy, typical)
        for done, choice in history:
            fresh.bind(done, choice)
        fresh.invalidate()  # recompute everything from the free-capacity arrays
        expected = fresh.select(pod)
        got = live.place(pod)
        assert got == expected
        if got is not None:
            history.append((pod, got))


def test_score_nodes_gives_the_scores_select_maximises():
    nodes = nodes_of(("free", "T4", 2, 32000, 65536), ("used", "T4", 2, 32000, 65536), ("a10", "A10", 1, 8000, 9999))
    for policy in POLICIES:
        p = placer(nodes, policy)
        p.bind(PodShape(1000, 0, 500, 1), Choice(1, (0,)))
        pod = PodShape(1000, 0, 500, 1, ("T4",))
        idx = np.flatnonzero(p.feasible(pod))
        scores, device = p.score_nodes(pod, idx)
        assert scores.shape == idx.shape
        choice = p.select(pod)
        assert choice is not None
        if policy != "random":
            assert scores[list(idx).index(choice.node)] == scores.max()
        if device is not None:
            assert choice.gpu_indices == (int(device[choice.node]),)


def test_frag_module_imports_only_stdlib_numpy_and_the_engine():
    roots = set()
    package = Path(frag.__file__).parent
    for node in (n for path in sorted(package.glob("*.py")) for n in ast.walk(ast.parse(path.read_text()))):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            roots.add(node.module if node.module.startswith("scheduling.engine") else node.module.split(".")[0])
    assert roots <= {"__future__", "math", "collections", "dataclasses", "struct", "typing", "numpy"} | {
        r for r in roots if r.startswith("scheduling.engine")
    }
