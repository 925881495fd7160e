"""Nodes as the engine sees them. Pure: no ``kubernetes``, no Django.

1. ``gpu_node_from`` turns a Node into a :class:`GpuNode`: devices from the NVIDIA device plugin's
   allocatable ``nvidia.com/gpu`` (on a MIG node, whose plugin offers slices, from GPU Feature
   Discovery's device count); the GPU model from GFD's product label, matched to the portal's known
   models by ``gpu_model_name``; memory per device from GFD; CPU and memory from allocatable; all
   labels; taints; cordoned when ``spec.unschedulable`` or not Ready.
2. ``node_problems`` says in words what keeps the portal from using a node fully (for
   ``manage.py cluster_check``): no device plugin, no GFD labels, unhealthy devices, cordoned or not
   Ready, no zone or rack label.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from scheduling.adapters.k8s.pods import object_labels, object_meta
from scheduling.adapters.k8s.resources import (
    GPU_RESOURCE,
    MIG_RESOURCE_PREFIX,
    cpu_milli_of,
    memory_mib_of,
    mig_resources,
    quantity,
)
from scheduling.engine.model import GpuNode, Taint, labels_of

GFD_PRODUCT = "nvidia.com/gpu.product"
GFD_MEMORY_MIB = "nvidia.com/gpu.memory"
GFD_COUNT = "nvidia.com/gpu.count"
ZONE_LABEL = "topology.kubernetes.io/zone"


def _family_and_memory(name: str) -> tuple[set[str], int]:
    tokens = {t for t in re.split(r"[-_ ]+", name.upper()) if t}
    memory = 0
    for token in tokens:
        match = re.fullmatch(r"(\d+)GB", token)
        if match:
            memory = int(match.group(1))
    return tokens, memory


def gpu_model_name(product: str, memory_gib: int, known_models: Sequence[str]) -> str:
    """The portal's GPU model name for a GFD product label.

    ``NVIDIA-A100-SXM4-80GB`` with 80 GiB matches a known model ``A100-80GB``: the known name's tokens
    other than its memory must all appear in the product, and the memory must agree. An exact match
    wins; with no match the product without its ``NVIDIA-`` prefix is used, so the node is still seen.
    """
    if product in known_models:
        return product
    product_tokens, product_memory = _family_and_memory(product)
    memory = memory_gib or product_memory
    best: tuple[int, str] | None = None
    for known in sorted(known_models):
        tokens, known_memory = _family_and_memory(known)
        family = {t for t in tokens if not re.fullmatch(r"\d+GB", t)}
        if not family or not family <= product_tokens:
            continue
        if known_memory and memory and abs(known_memory - memory) > max(2, memory // 10):
            continue
        score = len(family) * 10 + (1 if known_memory else 0)
        if best is None or score > best[0]:
            best = (score, known)
    if best is not None:
        return best[1]
    return re.sub(r"^NVIDIA[-_ ]", "", product) or product


def node_ready(node: Mapping) -> bool:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


def gpu_node_from(node: Mapping, *, known_models: Sequence[str] = ()) -> GpuNode:
    """A Node as the engine sees it. A node that is not Ready counts as cordoned."""
    labels = dict(object_labels(node))
    status = node.get("status") or {}
    spec = node.get("spec") or {}
    allocatable = status.get("allocatable") or {}
    whole = int(quantity(allocatable.get(GPU_RESOURCE)))
    mig = mig_resources(allocatable)
    memory_mib = int(labels.get(GFD_MEMORY_MIB) or 0) if (labels.get(GFD_MEMORY_MIB) or "").isdigit() else 0
    gpu_memory_gib = memory_mib // 1024
    if mig:
        # With the mixed MIG strategy the device plugin advertises slices, not devices; GFD counts devices.
        label_count = labels.get(GFD_COUNT, "")
        gpu_count = int(label_count) if label_count.isdigit() else max(1, whole)
    else:
        gpu_count = whole
    product = labels.get(GFD_PRODUCT, "")
    gpu_model = gpu_model_name(product, gpu_memory_gib, known_models) if gpu_count and product else None
    if gpu_count and gpu_model is None:
        gpu_model = "unknown-gpu"
    return GpuNode(
        name=object_meta(node).get("name", ""),
        gpu_model=gpu_model,
        gpu_count=gpu_count,
        cpu_milli=cpu_milli_of(allocatable.get("cpu")),
        memory_mib=memory_mib_of(allocatable.get("memory")),
        gpu_memory_gib=gpu_memory_gib,
        labels=labels_of(labels),
        taints=tuple(
            Taint(key=t.get("key", ""), value=t.get("value") or "", effect=t.get("effect", "NoSchedule"))
            for t in spec.get("taints") or []
        ),
        unschedulable=bool(spec.get("unschedulable")) or not node_ready(node),
        mig_enabled=bool(mig),
        # The mixed strategy advertises the slices that exist: the engine places only into them.
        mig_slices=tuple(sorted(mig.items())),
    )


def node_problems(node: Mapping, *, rack_label: str) -> list[str]:
    """What keeps the portal from using a node fully, in words, for ``manage.py cluster_check``."""
    labels = object_labels(node)
    status = node.get("status") or {}
    allocatable = status.get("allocatable") or {}
    capacity = status.get("capacity") or {}
    has_device_plugin = GPU_RESOURCE in capacity or any(k.startswith(MIG_RESOURCE_PREFIX) for k in capacity)
    problems = []
    if not node_ready(node):
        problems.append("not Ready")
    if (node.get("spec") or {}).get("unschedulable"):
        problems.append("cordoned")
    if labels.get(GFD_PRODUCT) and not has_device_plugin:
        problems.append(f"GPU node without {GPU_RESOURCE} capacity: is the NVIDIA device plugin running?")
    if has_device_plugin:
        if not labels.get(GFD_PRODUCT):
            problems.append(f"no {GFD_PRODUCT} label: is GPU Feature Discovery running?")
        if not labels.get(GFD_MEMORY_MIB):
            problems.append(f"no {GFD_MEMORY_MIB} label")
        if mig_resources(allocatable) and not labels.get(GFD_COUNT):
            problems.append(f"MIG node without {GFD_COUNT} label")
        whole = int(quantity(capacity.get(GPU_RESOURCE)))
        usable = int(quantity(allocatable.get(GPU_RESOURCE)))
        if usable < whole:
            problems.append(f"{whole - usable} of {whole} GPUs not allocatable (unhealthy?)")
    if not labels.get(ZONE_LABEL):
        problems.append(f"no {ZONE_LABEL} label")
    if rack_label and not labels.get(rack_label):
        problems.append(f"no {rack_label} label")
    return problems
