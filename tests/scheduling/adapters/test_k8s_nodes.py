"""Nodes as the engine sees them, and what keeps the portal from using one."""

from __future__ import annotations

from scheduling.adapters.k8s.nodes import gpu_model_name, gpu_node_from, node_problems
from tests.scheduling.adapters.factories import node


def test_it_reads_gpu_model_memory_topology_and_taints_from_the_node():
    raw = node(
        gpus=8,
        labels={"topology.kubernetes.io/rack": "r7"},
        taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        cpu="63500m",
        memory="512Gi",
    )
    gpu_node = gpu_node_from(raw, known_models=["A100-80GB", "H100-80GB", "T4"])
    assert gpu_node.gpu_model == "A100-80GB"
    assert (gpu_node.gpu_count, gpu_node.gpu_memory_gib) == (8, 80)
    assert (gpu_node.cpu_milli, gpu_node.memory_mib) == (63500, 512 * 1024)
    assert ("topology.kubernetes.io/rack", "r7") in gpu_node.labels
    assert ("topology.kubernetes.io/zone", "zone-a") in gpu_node.labels
    assert gpu_node.taints[0].key == "nvidia.com/gpu"
    assert not gpu_node.unschedulable
    assert not gpu_node.mig_enabled


def test_a_mig_node_counts_devices_from_gpu_feature_discovery():
    gpu_node = gpu_node_from(node(gpus=2, mig={"1g.10gb": 14}), known_models=["A100-80GB"])
    assert gpu_node.mig_enabled
    assert gpu_node.gpu_count == 2
    assert gpu_node.mig_slices == (("1g.10gb", 14),)  # fixed partitions: the slices that exist


def test_cordoned_and_not_ready_nodes_are_unschedulable():
    assert gpu_node_from(node(unschedulable=True)).unschedulable
    assert gpu_node_from(node(ready=False)).unschedulable


def test_an_unknown_product_keeps_its_own_name():
    assert gpu_model_name("NVIDIA-L40S", 46068 // 1024, ["A100-80GB"]) == "L40S"
    assert gpu_model_name("Tesla-T4", 15, ["T4", "A100-80GB"]) == "T4"


def test_it_names_what_a_node_lacks():
    raw = node(gpus=8)
    raw["metadata"]["labels"].pop("nvidia.com/gpu.product")
    raw["metadata"]["labels"].pop("topology.kubernetes.io/zone")
    problems = node_problems(raw, rack_label="topology.kubernetes.io/rack")
    assert any("GPU Feature Discovery" in p for p in problems)
    assert any("zone" in p for p in problems)
    assert any("rack" in p for p in problems)
    plain = node(gpus=0)
    plain["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-A100-SXM4-80GB"
    assert any("device plugin" in p for p in node_problems(plain, rack_label=""))
