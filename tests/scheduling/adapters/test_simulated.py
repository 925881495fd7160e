"""``SimulatedCluster.nodes``: each ``SimNode`` row as the engine's node, in name order."""

from __future__ import annotations

import pytest

from scheduling.adapters.simulated import SimulatedCluster
from scheduling.engine.model import GpuNode, Taint
from scheduling.models import SimNode

pytestmark = pytest.mark.django_db


def test_every_simulated_node_reaches_the_engine_with_its_model_labels_and_taints(world):
    SimNode.objects.create(
        name="a100-mig",
        gpu_model=world.models["A100-80GB"],
        gpu_count=4,
        cpu_milli=64_000,
        memory_mib=512 * 1024,
        labels={"zone": "b", "karpenter.sh/capacity-type": "spot"},
        taints=[{"key": "spot", "value": "true", "effect": "NoExecute"}, {"key": "dedicated"}],
        unschedulable=True,
        mig_enabled=True,
    )
    SimNode.objects.create(name="cpu-0", gpu_model=None, cpu_milli=16_000, memory_mib=65_536)
    nodes = {n.name: n for n in SimulatedCluster().nodes()}
    assert [n.name for n in SimulatedCluster().nodes()] == sorted(nodes)
    assert nodes["a100-mig"] == GpuNode(
        name="a100-mig",
        gpu_model="A100-80GB",
        gpu_count=4,
        cpu_milli=64_000,
        memory_mib=512 * 1024,
        gpu_memory_gib=80,
        labels=(("karpenter.sh/capacity-type", "spot"), ("zone", "b")),
        taints=(Taint("spot", "true", "NoExecute"), Taint("dedicated", "", "NoSchedule")),
        unschedulable=True,
        mig_enabled=True,
    )
    assert nodes["cpu-0"] == GpuNode(
        name="cpu-0", gpu_model=None, gpu_count=0, cpu_milli=16_000, memory_mib=65_536, gpu_memory_gib=0
    )
    assert (nodes["t4-0"].gpu_model, nodes["t4-0"].gpu_memory_gib) == ("T4", 16)  # the world's own
