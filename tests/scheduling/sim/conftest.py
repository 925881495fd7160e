"""Small generated traces for the simulator tests (tests never read ../shared)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from scheduling.sim.trace import TraceNode, TracePod, write_nodes, write_pods

MODELS = ("A10", "T4", "V100")


def make_nodes(count: int = 12, *, seed: int = 0) -> list[TraceNode]:
    rnd = random.Random(seed)
    nodes = []
    for i in range(count):
        gpus = rnd.choice((1, 2, 4, 8))
        nodes.append(
            TraceNode(
                name=f"node-{i:03d}",
                cpu_milli=gpus * rnd.choice((8000, 12000, 16000)),
                memory_mib=gpus * rnd.choice((32768, 65536)),
                gpu_count=gpus,
                gpu_model=MODELS[i % len(MODELS)],
            )
        )
    return nodes


def make_pods(count: int = 120, *, seed: int = 0, spec_share: float = 0.2) -> list[TracePod]:
    rnd = random.Random(seed)
    pods = []
    for i in range(count):
        kind = rnd.random()
        if kind < 0.15:
            num, milli = 0, 0
        elif kind < 0.55:
            num, milli = 1, rnd.choice((250, 470, 500, 810))
        elif kind < 0.9:
            num, milli = 1, 1000
        else:
            num, milli = rnd.choice((2, 4, 8)), 1000
        models = tuple(sorted(rnd.sample(MODELS, 2))) if num and rnd.random() < spec_share else ()
        pods.append(
            TracePod(
                name=f"pod-{i:04d}",
                cpu_milli=rnd.choice((1000, 2000, 4000, 8000)),
                memory_mib=rnd.choice((2048, 8192, 16384)),
                gpu_count=num,
                gpu_milli=milli,
                allowed_models=models,
                qos=rnd.choice(("LS", "BE", "Burstable")),
                creation_time_s=float(i * 10),
                deletion_time_s=float(i * 10 + rnd.choice((30, 200, 900))),
            )
        )
    return pods


@pytest.fixture
def trace_files(tmp_path: Path) -> tuple[Path, Path]:
    nodes, pods = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    write_nodes(nodes, make_nodes())
    write_pods(pods, make_pods())
    return nodes, pods
