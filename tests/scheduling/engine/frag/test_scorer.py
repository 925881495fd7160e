"""NodeScorer's bookkeeping (scheduling.engine.frag.scorer): what it keeps in step with every change must
equal a recount from its free-capacity arrays, whichever way the state changed."""

from __future__ import annotations

import random

import numpy as np
import pytest

from scheduling.engine.frag import Choice, NodeArrays, PodShape, TypicalPod
from scheduling.engine.frag.scorer import NodeScorer

ROWS = [(f"n{i}", ("A", "B", None)[i % 3], 0 if i % 3 == 2 else 4, 32_000, 65_536) for i in range(9)]
TYPICAL = (TypicalPod(1000, 1000, 1, ("A",), 0.5), TypicalPod(1000, 250, 1, (), 0.5))


def _free_per_model(scorer: NodeScorer) -> dict[str | None, int]:
    """Free GPU milli per GPU model, summed from the per-device array (absent devices are -1)."""
    out: dict[str | None, int] = {}
    for (_, model, _, _, _), devices in zip(ROWS, scorer.gpu_free_milli.tolist(), strict=True):
        out[model] = out.get(model, 0) + sum(v for v in devices if v > 0)
    return out


def _kept_per_model(scorer: NodeScorer) -> dict[str | None, int]:
    models = [*scorer.nodes.models, None]
    return {models[row]: int(value) for row, value in enumerate(scorer._row_free.tolist())}


def sync_several(
    scorer: NodeScorer, rng: random.Random, gpu_nodes: list[int], bound: list[tuple[PodShape, Choice]]
) -> list[tuple[PodShape, Choice]]:
    """Three random 4-GPU nodes set to random states at once (``sync``); the binds left on other nodes."""
    nodes = np.array(sorted(rng.sample(gpu_nodes, 3)), dtype=np.int64)
    gpu = np.array([[rng.choice((0, 500, 1000)) for _ in range(4)] for _ in nodes], dtype=np.int64)
    scorer.sync(nodes, np.full(3, 32_000), np.full(3, 65_536), gpu)
    return [(p, c) for p, c in bound if c.node not in set(nodes.tolist())]


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_the_free_gpu_per_model_it_keeps_equals_a_recount_after_binds_releases_and_syncs(seed: int) -> None:
    rng = random.Random(seed)
    scorer = NodeScorer(NodeArrays.of(ROWS), "portal", typical=TYPICAL)
    gpu_nodes = [i for i, row in enumerate(ROWS) if row[2]]
    bound: list[tuple[PodShape, Choice]] = []
    for _ in range(60):
        action = rng.random()
        if action < 0.4:  # bind a whole GPU or a share of one where it fits
            n = rng.choice(gpu_nodes)
            milli = rng.choice((1000, 250, 500))
            free = [d for d, v in enumerate(scorer.gpu_free_milli[n].tolist()) if v >= milli]
            if free:
                pod, choice = PodShape(1000, 0, milli, 1), Choice(n, (free[0],))
                scorer.bind(pod, choice)
                bound.append((pod, choice))
        elif action < 0.6 and bound:
            scorer.release(*bound.pop(rng.randrange(len(bound))))
        elif action < 0.8:  # one node set to a new state
            n = rng.choice(gpu_nodes)
            row = [rng.choice((0, 250, 1000)) for _ in range(4)]
            scorer.sync_node(n, 32_000, 65_536, row)
            bound = [(p, c) for p, c in bound if c.node != n]
        else:
            bound = sync_several(scorer, rng, gpu_nodes, bound)
        assert _kept_per_model(scorer) == _free_per_model(scorer)


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_one_node_scores_equal_the_array_pass(seed: int) -> None:
    """portal's one-node score (no arrays, for a node or two not met before) is the array pass's, to
    the last bit: the same score, device, measures after, and the same bookkeeping of the node's
    measure before, for whole-GPU, shared-GPU and CPU-only pods, on nodes just changed or not."""
    rng = random.Random(seed)
    typical = (
        TypicalPod(1000, 1000, 1, ("A",), 0.3),
        TypicalPod(2000, 250, 1, (), 0.25),
        TypicalPod(4000, 1000, 2, (), 0.2),
        TypicalPod(500, 500, 1, ("B",), 0.15),
        TypicalPod(1000, 0, 0, (), 0.1),
    )
    scalar, arrays = (NodeScorer(NodeArrays.of(ROWS), "portal", typical=typical) for _ in range(2))
    measures = scalar._measures
    assert measures is not None
    pods = [PodShape(1000, 0, 1000, 1), PodShape(3000, 0, 1000, 2), PodShape(500, 0, 250, 1)]
    pods += [PodShape(2000, 0, 700, 1), PodShape(1500, 0, 0, 0)]
    for _ in range(40):
        n = rng.randrange(len(ROWS))
        count = ROWS[n][2]
        state = [rng.choice((0, 100, 250, 300, 700, 1000)) for _ in range(count)] + [-1] * (4 - count)
        cpu = rng.choice((0, 1500, 9000, 32_000))
        for scorer in (scalar, arrays):
            scorer.sync_node(n, cpu, 65_536, state)
        for pod in rng.sample(pods, 3):
            if cpu < pod.cpu_milli:
                continue
            one = scalar._frag_delta_one(pod, n, measures)
            batch = np.column_stack(arrays._frag_delta(pod, np.array([n]))).tolist()[0]
            np.testing.assert_array_equal(one, batch)
            assert scalar._frag_cache is not None
            assert arrays._frag_cache is not None
            assert scalar._frag_cache.score[n] == arrays._frag_cache.score[n]
            assert scalar._metric_node[n] == arrays._metric_node[n]
