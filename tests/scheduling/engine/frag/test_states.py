"""NodeScorer's cache of each shape's scores per node state (scheduling.engine.frag.states): a scorer
that has lived through any sequence of changes scores every node as a new scorer given only the final
state does, and the state it keeps pickles (the dry run's kept state is shared pickled)."""

from __future__ import annotations

import pickle
import random

import numpy as np
import pytest

from scheduling.engine.frag import Choice, NodeArrays, PodShape, TypicalPod
from scheduling.engine.frag.scorer import NodeScorer
from scheduling.engine.frag.states import StateIndex
from tests.scheduling.engine.frag.test_scorer import sync_several

ROWS = [(f"n{i}", ("A", "B", None)[i % 3], 0 if i % 3 == 2 else 4, 32_000, 65_536) for i in range(12)]
TYPICAL = (
    TypicalPod(1000, 1000, 1, ("A",), 0.3),
    TypicalPod(2000, 250, 1, (), 0.3),
    TypicalPod(4000, 1000, 2, (), 0.2),
    TypicalPod(1000, 0, 0, (), 0.2),
)
PODS = [PodShape(1000, 0, 1000, 1), PodShape(3000, 0, 1000, 2), PodShape(500, 0, 250, 1), PodShape(1500, 0, 0, 0)]


def _fresh(scorer: NodeScorer, policy: str) -> NodeScorer:
    """A new scorer that has seen nothing but ``scorer``'s free capacity as it is now."""
    other = NodeScorer(NodeArrays.of(ROWS), policy, typical=TYPICAL)
    other.load(scorer.cpu_free_milli.copy(), scorer.memory_free_mib.copy(), scorer.gpu_free_milli.copy())
    return other


def _feasible(scorer: NodeScorer, pod: PodShape) -> np.ndarray:
    gpu = scorer.gpu_free_milli
    ok: np.ndarray
    if pod.gpu_count == 0:
        ok = np.ones(len(ROWS), dtype=bool)
    elif pod.is_sharing:
        ok = np.asarray((gpu >= pod.gpu_milli).any(axis=1))
    else:
        ok = np.asarray((gpu >= 1000).sum(axis=1) >= pod.gpu_count)
    return np.flatnonzero(ok & (scorer.cpu_free_milli >= pod.cpu_milli))


@pytest.mark.parametrize("policy", ["portal", "fgd"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_scores_after_any_changes_equal_those_of_a_scorer_that_only_saw_the_final_state(policy: str, seed: int):
    rng = random.Random(seed)
    scorer = NodeScorer(NodeArrays.of(ROWS), policy, typical=TYPICAL)
    gpu_nodes = [i for i, row in enumerate(ROWS) if row[2]]
    bound: list[tuple[PodShape, Choice]] = []
    for _ in range(50):
        action = rng.random()
        if action < 0.35:  # a pod where the scorer would put it
            pod = rng.choice(PODS)
            idx = _feasible(scorer, pod)
            if idx.size:
                scores, device = scorer.score_nodes(pod, idx)
                n = int(idx[int(np.argmax(scores))])
                if pod.is_sharing:
                    assert device is not None
                    devices = (int(device[n]),)
                else:
                    devices = tuple(np.flatnonzero(scorer.gpu_free_milli[n] >= 1000)[: pod.gpu_count].tolist())
                choice = Choice(n, devices)
                scorer.bind(pod, choice)
                bound.append((pod, choice))
        elif action < 0.5 and bound:
            scorer.release(*bound.pop(rng.randrange(len(bound))))
        elif action < 0.75:  # one node set to a state, maybe one another node is in
            n = rng.choice(gpu_nodes)
            scorer.sync_node(n, rng.choice((8000, 32_000)), 65_536, [rng.choice((0, 250, 1000)) for _ in range(4)])
            bound = [(p, c) for p, c in bound if c.node != n]
        else:
            bound = sync_several(scorer, rng, gpu_nodes, bound)
        fresh = _fresh(scorer, policy)
        for pod in PODS:
            idx = _feasible(scorer, pod)
            if not idx.size:
                continue
            scores, device = scorer.score_nodes(pod, idx)
            expected, expected_device = fresh.score_nodes(pod, idx)
            np.testing.assert_array_equal(scores, expected)
            if pod.is_sharing:
                assert device is not None
                assert expected_device is not None
                np.testing.assert_array_equal(device[idx], expected_device[idx])


def test_a_state_has_one_id_whichever_node_is_in_it_and_ids_start_over_after_a_reset():
    index = StateIndex(3, 2)
    index.set_one(0, 0, 1000, [1000, 0])
    index.set_one(1, 0, 1000, [0, 1000])
    index.set_one(2, 0, 1000, [1000, 0])
    ids = index.current(np.zeros(3, np.int64), np.full(3, 1000), np.array([[1000, 0], [0, 1000], [1000, 0]]))
    assert ids[0] == ids[2] != ids[1]
    index.reset()
    assert index.known_id(0) is None
    again = index.current(np.zeros(3, np.int64), np.full(3, 1000), np.array([[1000, 0], [0, 1000], [1000, 0]]))
    assert again[0] == again[2] != again[1]
    assert len(index) == 2


def test_a_scorer_with_cached_states_pickles_and_scores_the_same_after():
    scorer = NodeScorer(NodeArrays.of(ROWS), "portal", typical=TYPICAL)
    scorer.sync_node(0, 8000, 65_536, [250, 1000, 1000, 0])
    idx = _feasible(scorer, PODS[0])
    before, _ = scorer.score_nodes(PODS[0], idx)
    loaded = pickle.loads(pickle.dumps(scorer))
    loaded.sync_node(1, 8000, 65_536, [250, 1000, 1000, 0])  # interns a state after loading
    scorer.sync_node(1, 8000, 65_536, [250, 1000, 1000, 0])
    idx = _feasible(scorer, PODS[0])
    np.testing.assert_array_equal(loaded.score_nodes(PODS[0], idx)[0], scorer.score_nodes(PODS[0], idx)[0])
    assert before.size
