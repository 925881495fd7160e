"""What every GPU of the cluster holds now, and each GPU model's free capacity and fragmentation.

From a snapshot (nodes, the placements of admitted and running workloads, foreign pods):

1. Per device, its holders: a whole-GPU replica, fractions (each with its share), MIG slices (each
   with its profile and first memory slice), or a foreign pod; its state (``free``, ``whole``,
   ``shared``, ``mig``, ``foreign``) and how full it is. A device's capacity is 1000 milli-GPU, more in
   an overcommitted node pool (``pools.share_capacity_milli``); a MIG slice fills its memory slices'
   share (``3g.40gb`` on 80 GB: 4/8).
2. Per GPU model: GPUs, GPUs allocated (the holders' quota shares summed, foreign pods included),
   GPUs free as whole devices on schedulable nodes, GPU free in fragments (the free part of partly
   held devices on schedulable nodes), free MIG capacity, free capacity on cordoned nodes.
3. The FGD paper's fragmentation of each model's schedulable non-MIG nodes (``frag.measure.frag_milli``,
   Weng et al., ATC '23): for the typical pods of the current job mix (``frag.typical_pods`` of every
   replica shape of the snapshot's workloads, pending and running), the expected GPU milli that a
   typical pod could not use. MIG nodes and cordoned nodes are outside it (no pod of FGD's model can
   run on them).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .frag.measure import frag_milli
from .frag.plugins import replica_shapes
from .frag.workload import TypicalArrays, TypicalPod, typical_pods
from .mig import default_device_memory_gib, mig_geometry
from .model import GpuNode, Snapshot, WorkloadState
from .pools import FULL, pool_index, share_capacity_milli

FREE, WHOLE, SHARED, MIG, FOREIGN = "free", "whole", "shared", "mig", "foreign"


@dataclass(frozen=True, slots=True)
class Holder:
    """One holder of a device: a workload (``""`` for a foreign pod) and the share it holds there."""

    workload: str
    milli: int
    mig_profile: str | None = None
    mig_slot: int | None = None


@dataclass(frozen=True, slots=True)
class Device:
    index: int
    state: str
    capacity_milli: int
    used_milli: int
    holders: tuple[Holder, ...] = ()

    @property
    def free_milli(self) -> int:
        return max(0, self.capacity_milli - self.used_milli)


@dataclass(frozen=True, slots=True)
class NodeOccupancy:
    node: GpuNode
    pool: str  # "" for no pool
    devices: tuple[Device, ...]
    cpu_used_milli: int
    memory_used_mib: int
    workloads: tuple[str, ...]  # ids of the workloads with a replica here, sorted


@dataclass(frozen=True, slots=True)
class ModelSummary:
    """One GPU model, in milli-GPU (1000 a GPU) except the counts."""

    gpu_model: str
    nodes: int
    gpus: int
    allocated_milli: int
    free_whole: int  # fully free devices on schedulable non-MIG nodes
    free_fragment_milli: int  # free part of partly held devices on schedulable non-MIG nodes
    mig_free_milli: int  # free MIG memory slices' share on schedulable MIG nodes
    cordoned_free_milli: int
    fragmentation_milli: float  # FGD's measure over the schedulable non-MIG nodes, in physical milli-GPU
    measured_free_milli: int  # the free physical milli-GPU FGD's measure was taken over


@dataclass(frozen=True, slots=True)
class Occupancy:
    nodes: tuple[NodeOccupancy, ...]
    models: tuple[ModelSummary, ...]
    typical: tuple[TypicalPod, ...]


def cluster_occupancy(snapshot: Snapshot) -> Occupancy:
    """The cluster's occupancy (see the module docstring). Nodes in name order, models by name."""
    memory = dict(snapshot.gpu_memory_gib)
    held: dict[tuple[str, int], list[Holder]] = {}
    cpu: dict[str, int] = {}
    mem: dict[str, int] = {}
    on_node: dict[str, set[str]] = {}
    nodes = {n.name: n for n in snapshot.nodes}
    for w in snapshot.workloads:
        if w.state == WorkloadState.PENDING:
            continue
        for p in w.placements:
            node = nodes.get(p.node)
            if node is None:
                continue
            on_node.setdefault(p.node, set()).add(w.id)
            cpu[p.node] = cpu.get(p.node, 0) + p.cpu_milli
            mem[p.node] = mem.get(p.node, 0) + p.memory_mib
            for d in p.gpu_indices:
                holder = _holder(w.id, p.gpu_milli, p.mig_profile, p.mig_slot, node, memory)
                held.setdefault((p.node, d), []).append(holder)
    for f in snapshot.foreign:
        if f.node not in nodes:
            continue
        cpu[f.node] = cpu.get(f.node, 0) + f.cpu_milli
        mem[f.node] = mem.get(f.node, 0) + f.memory_mib
        for d in f.gpu_indices:
            held.setdefault((f.node, d), []).append(Holder("", f.gpu_milli))
    rows = []
    for node in sorted(snapshot.nodes, key=lambda n: n.name):
        index = pool_index(dict(node.labels), snapshot.pools)
        cap = FULL
        if index >= 0 and not node.mig_enabled:
            cap = share_capacity_milli(snapshot.pools[index].overcommit_ratio)
        devices = tuple(_device(d, cap, node, tuple(held.get((node.name, d), ()))) for d in range(node.gpu_count))
        rows.append(
            NodeOccupancy(
                node=node,
                pool=snapshot.pools[index].name if index >= 0 else "",
                devices=devices,
                cpu_used_milli=cpu.get(node.name, 0),
                memory_used_mib=mem.get(node.name, 0),
                workloads=tuple(sorted(on_node.get(node.name, ()))),
            )
        )
    typical = typical_pods(replica_shapes(snapshot))
    return Occupancy(tuple(rows), _summaries(rows, typical), typical)


def _holder(
    workload: str, milli: int, profile: str | None, slot: int | None, node: GpuNode, memory: dict[str, int]
) -> Holder:
    if profile:
        model = node.gpu_model or ""
        gib = node.gpu_memory_gib or memory.get(model, 0) or default_device_memory_gib(model)
        geometry = mig_geometry(profile, gib)
        share = geometry.gpu_milli if geometry is not None else 0
        return Holder(workload, share, profile, slot)
    return Holder(workload, min(milli, FULL))


def _device(index: int, cap: int, node: GpuNode, holders: tuple[Holder, ...]) -> Device:
    if not holders:
        return Device(index, FREE, cap, 0)
    if node.mig_enabled and any(h.mig_profile for h in holders):
        used = min(FULL, sum(h.milli for h in holders))
        return Device(index, MIG, FULL, used, holders)
    # A whole GPU (or a foreign pod's whole device) holds all of the device, overcommitted or not.
    whole = [h for h in holders if h.milli >= FULL]
    if whole:
        state = FOREIGN if all(not h.workload for h in holders) else WHOLE
        return Device(index, state, cap, cap, holders)
    used = min(cap, sum(h.milli for h in holders))
    state = FOREIGN if all(not h.workload for h in holders) else SHARED
    return Device(index, state, cap, used, holders)


def _summaries(rows: list[NodeOccupancy], typical: tuple[TypicalPod, ...]) -> tuple[ModelSummary, ...]:
    models = tuple(sorted({r.node.gpu_model for r in rows if r.node.gpu_model and r.node.gpu_count > 0}))
    tp = TypicalArrays.build(typical, models)
    out = []
    for row_index, model in enumerate(models):
        members = [r for r in rows if r.node.gpu_model == model and r.node.gpu_count > 0]
        allocated = free_whole = fragments = mig_free = cordoned = 0
        measured = [r for r in members if not r.node.unschedulable and not r.node.mig_enabled]
        for r in members:
            for d in r.devices:
                allocated += sum(h.milli for h in d.holders)
                if r.node.unschedulable:
                    cordoned += d.free_milli
                elif r.node.mig_enabled:
                    mig_free += d.free_milli
                elif d.state == FREE:
                    free_whole += 1
                else:
                    fragments += d.free_milli
        # Fragmentation and the free GPU it is measured over in physical GPUs: on a pool that overcommits
        # fractions a device holds more than 1000 milli of shares, which would make an empty 12-GPU
        # pool of 1.25 read "15 GPUs fragmented".
        scale = np.array([FULL / r.devices[0].capacity_milli if r.devices else 1.0 for r in measured])
        free_measured = round(
            sum(s * sum(d.free_milli for d in r.devices) for s, r in zip(scale, measured, strict=True))
        )
        frag = 0.0
        if measured and typical:
            width = max(r.node.gpu_count for r in measured)
            gpu = np.full((len(measured), width), -1, dtype=np.int64)
            for i, r in enumerate(measured):
                gpu[i, : r.node.gpu_count] = [d.free_milli for d in r.devices]
            cpu = np.array([r.node.cpu_milli - r.cpu_used_milli for r in measured], dtype=np.int64)
            frag = float((frag_milli(cpu, gpu, np.full(len(measured), row_index, dtype=np.int64), tp) * scale).sum())
        out.append(
            ModelSummary(
                gpu_model=model,
                nodes=len(members),
                gpus=sum(r.node.gpu_count for r in members),
                allocated_milli=allocated,
                free_whole=free_whole,
                free_fragment_milli=fragments,
                mig_free_milli=mig_free,
                cordoned_free_milli=cordoned,
                fragmentation_milli=frag,
                measured_free_milli=free_measured,
            )
        )
    return tuple(out)


__all__ = [
    "FOREIGN",
    "FREE",
    "MIG",
    "SHARED",
    "WHOLE",
    "Device",
    "Holder",
    "ModelSummary",
    "NodeOccupancy",
    "Occupancy",
    "cluster_occupancy",
]
