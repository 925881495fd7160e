"""The FGD-paper plugins see the cycle's cluster lazily (the nodes changed since the last score are
synced in one step): their scores and device choices must equal those of a plugin loaded afresh from
the same state, whatever sequence of takes and discards led there."""

from __future__ import annotations

import random

import numpy as np
import pytest

from scheduling.engine.capacity import Cluster, Statement
from scheduling.engine.fit import Shape
from scheduling.engine.frag.plugins import FragPlugin
from scheduling.engine.model import NodePool, ReplicaPlacement, Snapshot, labels_of
from scheduling.engine.scorers import PluginSetup, ScoreContext, pick_devices
from tests.scheduling.engine.builders import node

MODEL = "A100-80GB"
SHAPES = (
    Shape(MODEL, gpus=1, cpu_milli=4000, memory_mib=16_000),
    Shape(MODEL, gpus=2, cpu_milli=8000),
    Shape(MODEL, gpus=4, cpu_milli=16_000),
    Shape(MODEL, milli=250, cpu_milli=2000),
    Shape(MODEL, milli=700, cpu_milli=2000),
    Shape(None, cpu_milli=6000, memory_mib=8000),
)
TYPICAL = ((4000, 1000, 1, ()), (2000, 250, 1, ()), (2000, 700, 1, ()), (8000, 1000, 2, ()), (6000, 0, 0, ()))


def _cluster() -> Cluster:
    nodes = [node(f"n{i:02d}", gpus=8 if i % 3 else 4, cpu=96_000) for i in range(10)]
    nodes.append(node("mig", mig=True))
    nodes.append(node("cpu", model=None, cpu=64_000))
    nodes += [node(f"o{i}", labels={"pool": "over"}) for i in range(2)]
    snapshot = Snapshot(
        nodes=tuple(nodes),
        cluster_queues=(),
        local_queues=(),
        workloads=(),
        pools=(NodePool("over", labels_of({"pool": "over"}), overcommit_ratio=1.5),),
    )
    return Cluster(snapshot)


def _scores(plugin: FragPlugin, cluster: Cluster, shape: Shape) -> tuple[list[float], list[int]]:
    idx = np.arange(cluster.n)
    scores = plugin.score(ScoreContext(cluster, shape, idx, "job", 0)).tolist()
    devices = [plugin.pick(cluster, i, shape, "job") for i in range(cluster.n)] if shape.kind == "fraction" else []
    return scores, [d[0][0] if d is not None and d[0] else -1 for d in devices]


@pytest.mark.parametrize("policy", ["portal", "fgd", "bestfit"])  # clustering mirrors every bind
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_lazily_synced_plugin_scores_as_one_loaded_from_the_same_state(policy: str, seed: int) -> None:
    rng = random.Random(seed)
    cluster = _cluster()
    setup = PluginSetup(cluster, 0, TYPICAL)
    live = FragPlugin(policy, setup)
    for _ in range(60):
        stmt = Statement(cluster)
        for _k in range(rng.randint(1, 12)):  # more than a few changed nodes sync as arrays
            shape = rng.choice(SHAPES)
            i = rng.randrange(cluster.n)
            devices, slot = pick_devices(cluster, i, shape)
            if (shape.kind != "cpu" and not devices) or cluster.cpu_free[i] < shape.cpu_milli:
                continue
            stmt.take(
                ReplicaPlacement(
                    node=cluster.nodes[i].name,
                    gpu_indices=devices,
                    gpu_milli=1000 if shape.gpus else shape.milli,
                    mig_slot=slot,
                    cpu_milli=shape.cpu_milli,
                    memory_mib=shape.memory_mib,
                )
            )
        if rng.random() < 0.3:
            stmt.discard()
        shape = rng.choice(SHAPES)
        fresh = FragPlugin(policy, PluginSetup(cluster, 0, TYPICAL))
        assert _scores(live, cluster, shape) == _scores(fresh, cluster, shape)
