"""The fit rule: whether one more replica of a shape goes on a node now, written once.

For one replica of a :class:`Shape` on a node, with the node's free capacity from ``capacity.Cluster``:

1. GPUs, by the shape's kind:
   - ``whole``: ``gpus`` fully free devices on the node;
   - ``fraction``: one device with ``milli`` free;
   - ``mig``: a device with room for the profile's compute slices whose memory slices are free at one
     of the profile's valid starts (see ``mig``);
   - ``cpu``: nothing.
2. CPU, then memory. A resource the shape does not ask for always fits (free capacity below zero, from
   foreign pods or a node that shrank, only matters to replicas that ask for that resource).

The rule comes in two forms that ``tests/scheduling/engine/test_fit.py`` keeps equal: vectorised over
nodes (:func:`fits`, :func:`misfit`, :func:`replica_capacity`; ``nodes`` is an index array or a
slice, so a GPU model's contiguous block of nodes is tested on array views without gathering) and
scalar for one node (:func:`fits_node`, :func:`mig_start` for one device). :func:`contiguous` is the
test for a block of consecutive free devices (NVLink neighbours on most boards).

Static filters (model, MIG mode, selector, taints, cordon) are not part of the fit rule: they never
change during a cycle and are cached in ``filters``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .capacity import FULL, Cluster
from .mig import MigGeometry, devices_for_memory, mig_start, mig_table
from .model import Resources

Nodes = np.ndarray | slice
"""Node indices: an integer index array, or a slice (a GPU model's nodes are one contiguous block)."""

# What :func:`misfit` reports per node, in the order the rule is checked.
FITS, NO_GPU, NO_CPU, NO_MEMORY = range(4)


@dataclass(frozen=True, slots=True)
class Shape:
    """One replica's request on one GPU model (``gpu_model`` None for CPU-only work)."""

    gpu_model: str | None
    gpus: int = 0  # whole devices
    milli: int = 0  # share of one device, 1..999
    mig: MigGeometry | None = None
    cpu_milli: int = 0
    memory_mib: int = 0
    # Derived from the fields above once (read for every node choice): "mig", "whole", "fraction", "cpu".
    kind: str = field(init=False, compare=False, repr=False)
    # The hash of the fields above, once: a shape sits in the keys of every per-cycle memo a decision
    # reads (its MIG geometry would be hashed deep each time). Not pickled (``__getstate__``): another
    # process hashes strings differently.
    _hash: int = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.mig is not None:
            kind = "mig"
        elif self.gpus:
            kind = "whole"
        elif self.milli:
            kind = "fraction"
        else:
            kind = "cpu"
        object.__setattr__(self, "kind", kind)
        fields = (self.gpu_model, self.gpus, self.milli, self.mig, self.cpu_milli, self.memory_mib)
        object.__setattr__(self, "_hash", hash(fields))

    def __hash__(self) -> int:
        return self._hash

    def __getstate__(self) -> tuple[object, ...]:
        return (self.gpu_model, self.gpus, self.milli, self.mig, self.cpu_milli, self.memory_mib)

    def __setstate__(self, state: tuple[object, ...]) -> None:
        for name, value in zip(_SHAPE_FIELDS, state, strict=True):
            object.__setattr__(self, name, value)
        self.__post_init__()

    @property
    def quota_milli(self) -> int:
        """The replica's quota share in milli-GPU (``shares``: a MIG slice counts its memory slices)."""
        if self.mig is not None:
            return self.mig.gpu_milli
        return self.gpus * FULL + self.milli


_SHAPE_FIELDS = ("gpu_model", "gpus", "milli", "mig", "cpu_milli", "memory_mib")


def shape_of(
    cluster: Cluster, mig_profiles: dict[str, tuple[str, ...]], resources: Resources, model: str | None
) -> Shape | str:
    """The replica shape of ``resources`` on GPU ``model``, or why the request cannot exist on that
    model (a MIG profile the model does not offer, GPU memory of an unknown model)."""
    cpu, memory_mib = resources.cpu_milli, resources.memory_mib
    if not resources.wants_gpu:
        return Shape(model, cpu_milli=cpu, memory_mib=memory_mib)
    if model is None:
        return "job wants a GPU but no GPU model is available"
    if resources.mig_profile:
        supported = mig_profiles.get(model)
        if supported is not None and resources.mig_profile not in supported:
            return f"{model} does not offer MIG profile {resources.mig_profile}"
        memory = cluster.memory_of(model)
        geometry = cluster.mig(resources.mig_profile, memory)
        if geometry is None:
            table = mig_table(memory)
            if table is None:
                return f"{model} is not a MIG GPU (no NVIDIA MIG table matches it)"
            return f"MIG profile {resources.mig_profile} is not in NVIDIA's MIG table for {model}"
        return Shape(model, mig=geometry, cpu_milli=cpu, memory_mib=memory_mib)
    if resources.gpu_memory_gib:
        memory = cluster.memory_of(model)
        if memory <= 0:
            return f"GPU memory of {model} is unknown"
        gpus = devices_for_memory(resources.gpu_memory_gib, memory)
        return Shape(model, gpus=gpus, cpu_milli=cpu, memory_mib=memory_mib)
    if resources.gpu:
        return Shape(model, gpus=resources.gpu, cpu_milli=cpu, memory_mib=memory_mib)
    return Shape(model, milli=resources.gpu_milli, cpu_milli=cpu, memory_mib=memory_mib)


# -- vectorised ------------------------------------------------------------------------------------


def gpu_fits(cluster: Cluster, shape: Shape, nodes: Nodes, within: np.ndarray | None = None) -> np.ndarray:
    """Step 1 per node of ``nodes`` (a new array; ``within``, a mask over ``nodes``, is and-ed in)."""
    kind = shape.kind
    if kind == "whole":
        ok = cluster.full_free[nodes] >= shape.gpus
    elif kind == "fraction":
        ok = cluster.max_share[nodes] >= shape.milli
    elif kind == "mig":
        assert shape.mig is not None
        ok = _mig_fits(cluster, shape.mig, nodes)
    elif within is not None:
        return within.copy()
    else:
        return np.ones(len(cluster.cpu_free[nodes]), dtype=bool)
    if within is not None:
        ok &= within
    return ok


def _mig_fits(cluster: Cluster, geometry: MigGeometry, nodes: Nodes) -> np.ndarray:
    masks = cluster.mig_mask[nodes]
    exists = np.arange(cluster.width)[None, :] < cluster.gpu_count[nodes][:, None]
    room = exists & (cluster.mig_compute[nodes] + geometry.compute <= geometry.device_compute)
    any_start = np.zeros(masks.shape, dtype=bool)
    for start in geometry.starts:
        any_start |= (masks & geometry.mask_at(start)) == 0
    ok = np.asarray((room & any_start).any(axis=1))
    if cluster.mig_layout:  # fixed partitions: only the slices that exist
        index = np.arange(cluster.n)[nodes]
        for k in np.flatnonzero(cluster.mig_fixed[index]).tolist():
            ok[k] = cluster.free_fixed_slot(int(index[k]), geometry) is not None
    return ok


def fits(cluster: Cluster, shape: Shape, nodes: Nodes, within: np.ndarray | None = None) -> np.ndarray:
    """The whole rule per node of ``nodes``: True where one more replica fits now."""
    ok = gpu_fits(cluster, shape, nodes, within)
    if shape.cpu_milli:
        ok &= cluster.cpu_free[nodes] >= shape.cpu_milli
    if shape.memory_mib:
        ok &= cluster.mem_free[nodes] >= shape.memory_mib
    return ok


def misfit(cluster: Cluster, shape: Shape, nodes: Nodes) -> np.ndarray:
    """Per node: ``FITS``, or the first step of the rule that fails (``NO_GPU``, ``NO_CPU``, ``NO_MEMORY``)."""
    codes = np.where(gpu_fits(cluster, shape, nodes), FITS, NO_GPU).astype(np.int8)
    if shape.cpu_milli:
        codes[(codes == FITS) & (cluster.cpu_free[nodes] < shape.cpu_milli)] = NO_CPU
    if shape.memory_mib:
        codes[(codes == FITS) & (cluster.mem_free[nodes] < shape.memory_mib)] = NO_MEMORY
    return codes


def replica_capacity(cluster: Cluster, shape: Shape, nodes: Nodes) -> np.ndarray:
    """How many more replicas of ``shape`` each node could hold (MIG: at most 1 counted), as int64.

    Exact for whole GPUs and fractions (each replica takes one unit of the count), so summing it over
    nodes says how many replicas of a gang fit. A shape that asks for nothing counts 1 per node.
    """
    cap: np.ndarray | None = None
    if shape.kind == "whole":
        cap = cluster.full_free[nodes] // shape.gpus
    elif shape.kind == "fraction":
        cap = (np.clip(cluster.dev_free[nodes], 0, None) // shape.milli).sum(axis=1)
    elif shape.kind == "mig":
        cap = gpu_fits(cluster, shape, nodes)
    if shape.cpu_milli:
        cpu = cluster.cpu_free[nodes] // shape.cpu_milli
        cap = cpu if cap is None else np.minimum(cap, cpu)
    if shape.memory_mib:
        memory = cluster.mem_free[nodes] // shape.memory_mib
        cap = memory if cap is None else np.minimum(cap, memory)
    if cap is None:
        return np.ones(len(cluster.cpu_free[nodes]), dtype=np.int64)
    return cap.astype(np.int64, copy=False)


def empty_capacity(cluster: Cluster, shape: Shape, nodes: np.ndarray) -> np.ndarray:
    """How many replicas of ``shape`` each node of ``nodes`` holds when nothing runs on it: the same
    rule as :func:`replica_capacity`, on the node's total capacity instead of its free capacity
    (MIG: every instance of the profile that fits on its empty devices)."""
    big = np.iinfo(np.int64).max // 4
    cap = np.full(len(nodes), big, dtype=np.int64)
    count = cluster.gpu_count[nodes].astype(np.int64)
    if shape.kind == "whole":
        cap = count // shape.gpus
    elif shape.kind == "fraction":
        cap = count * (cluster.dev_cap[nodes].astype(np.int64) // shape.milli)  # a pool's overcommit
    elif shape.kind == "mig":
        assert shape.mig is not None
        cap = count * mig_instances(shape.mig)
        for k in np.flatnonzero(cluster.mig_fixed[nodes]).tolist():
            cap[k] = len(cluster.fixed_slots(int(nodes[k]), shape.mig.profile) or ())
    if shape.cpu_milli:
        cap = np.minimum(cap, cluster.cpu_total[nodes] // shape.cpu_milli)
    if shape.memory_mib:
        cap = np.minimum(cap, cluster.mem_total[nodes] // shape.memory_mib)
    return cap


def mig_instances(geometry: MigGeometry) -> int:
    """How many instances of one profile an empty device holds (its starts, taken lowest first)."""
    mask, compute, count = 0, 0, 0
    while (start := mig_start(mask, compute, geometry)) is not None:
        mask |= geometry.mask_at(start)
        compute += geometry.compute
        count += 1
    return count


def contiguous(cluster: Cluster, gpus: int, nodes: Nodes) -> np.ndarray:
    """True where the node has ``gpus`` fully free devices with consecutive indices: where its longest
    run of them (``Cluster.free_run``, kept with the free-device bitmask ``free_bits``) is at least
    ``gpus`` (for 0: where any device is fully free)."""
    if gpus <= 0:
        return cluster.free_bits[nodes] != 0
    return cluster.free_run[nodes] >= gpus


# -- scalar ----------------------------------------------------------------------------------------


def fits_node(cluster: Cluster, shape: Shape, i: int) -> bool:
    """The whole rule for node ``i`` alone (the same answer as :func:`fits`, without arrays)."""
    if shape.cpu_milli and cluster.cpu_free[i] < shape.cpu_milli:
        return False
    if shape.memory_mib and cluster.mem_free[i] < shape.memory_mib:
        return False
    kind = shape.kind
    if kind == "whole":
        return bool(cluster.full_free[i] >= shape.gpus)
    if kind == "fraction":
        return bool(cluster.max_share[i] >= shape.milli)
    if kind == "mig":
        assert shape.mig is not None
        if cluster.mig_fixed[i]:
            return cluster.free_fixed_slot(i, shape.mig) is not None
        masks = cluster.mig_mask[i].tolist()
        compute = cluster.mig_compute[i].tolist()
        return any(mig_start(masks[d], compute[d], shape.mig) is not None for d in range(int(cluster.gpu_count[i])))
    return True
