"""Capacity held by pods outside the portal's active job attempts. Pure: no ``kubernetes``, no Django.

``foreign_usage_from`` charges to its node every pod that holds capacity (bound, not finished) and
does not belong to an active job attempt, in order of namespace and name:

1. Devices already accounted for: those of the active placements (``held``), and those annotated on
   the portal's pods of inactive attempts (a preempted victim in its grace period).
2. A portal pod of an inactive attempt holds exactly its annotated devices at its annotated share
   (a MIG slice: no device, see below).
3. Any other pod's whole GPUs go to its node's highest-numbered devices nobody accounts for yet
   (the device plugin does not say which it gave); if there are not enough, the count still holds.
4. Every such pod holds its CPU and memory request. MIG slices of foreign pods are not tracked per
   slice.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from scheduling.adapters.k8s.pods import (
    ANN_DEVICES,
    ANN_GPU_MILLI,
    ANN_MIG_PROFILE,
    object_meta,
    pod_holds_capacity,
    pod_job_attempt,
)
from scheduling.adapters.k8s.resources import pod_request
from scheduling.engine.model import ForeignUsage, GpuNode


def foreign_usage_from(
    pods: Iterable[Mapping],
    nodes: Sequence[GpuNode],
    *,
    active: set[tuple[int, int]],
    held: Mapping[str, Iterable[int]] | None = None,
) -> list[ForeignUsage]:
    """Capacity held by pods outside the portal's active job attempts.

    A portal pod of an inactive attempt (a preempted victim in its grace period) holds exactly the
    devices in its annotation. Any other pod's whole GPUs are charged to the node's highest-numbered
    devices that neither the active placements (``held``: node -> device indices) nor another pod
    account for, since the device plugin does not say which ones it gave; charging a device the
    engine already counts as used would hide one busy GPU. MIG slices of foreign pods are not tracked
    per slice (their CPU and memory are).
    """
    gpu_count = {n.name: n.gpu_count for n in nodes}
    ordered = sorted(pods, key=lambda p: (object_meta(p).get("namespace", ""), object_meta(p).get("name", "")))
    taken = _devices_accounted_for(ordered, active=active, held=held)
    usage: list[ForeignUsage] = []
    for pod in ordered:
        if not pod_holds_capacity(pod):
            continue
        key = pod_job_attempt(pod)
        if key is not None and key in active:
            continue
        node = pod["spec"]["nodeName"]
        if node not in gpu_count:
            continue
        request = pod_request(pod)
        if key is not None:
            devices, milli = _annotated_share(pod)
        else:
            devices, milli = _charge_highest_free(request.gpus, gpu_count[node], taken[node]), 1000
        usage.append(
            ForeignUsage(
                node=node,
                gpu_indices=devices,
                gpu_milli=milli,
                cpu_milli=request.cpu_milli,
                memory_mib=request.memory_mib,
            )
        )
    return usage


def _annotated_devices(pod: Mapping) -> tuple[int, ...]:
    raw = (object_meta(pod).get("annotations") or {}).get(ANN_DEVICES, "")
    return tuple(int(x) for x in raw.split(",") if x.strip().isdigit())


def _devices_accounted_for(
    ordered: Sequence[Mapping], *, active: set[tuple[int, int]], held: Mapping[str, Iterable[int]] | None
) -> defaultdict[str, set[int]]:
    """Step 1: node -> devices of the active placements and of the portal's pods of inactive attempts."""
    taken: defaultdict[str, set[int]] = defaultdict(set)
    for name, devices in (held or {}).items():
        taken[name].update(devices)
    for pod in ordered:
        key = pod_job_attempt(pod)
        if key is not None and key not in active and pod_holds_capacity(pod):
            taken[pod["spec"]["nodeName"]].update(_annotated_devices(pod))
    return taken


def _annotated_share(pod: Mapping) -> tuple[tuple[int, ...], int]:
    """Step 2: a portal pod's devices and GPU share from its annotations (a MIG slice: no device)."""
    annotations = object_meta(pod).get("annotations") or {}
    devices = _annotated_devices(pod)
    if annotations.get(ANN_MIG_PROFILE):
        devices = ()  # the slice is not modelled as foreign usage; see the module docstring
    return devices, int(annotations.get(ANN_GPU_MILLI, "1000") or 1000)


def _charge_highest_free(gpus: int, gpu_count: int, taken: set[int]) -> tuple[int, ...]:
    """Step 3: ``gpus`` of the highest-numbered devices not in ``taken``, which they join."""
    highest_first = range(gpu_count - 1, -1, -1)
    picked = [d for d in highest_first if d not in taken][:gpus]
    # More GPUs than devices nobody accounts for (the books disagree): keep the count anyway.
    picked += [d for d in highest_first if d not in picked][: gpus - len(picked)]
    devices = tuple(picked)
    taken.update(devices)
    return devices
