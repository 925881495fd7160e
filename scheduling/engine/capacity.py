"""Free capacity of the cluster as numpy arrays, derived from placements, with staged changes.

Nodes are indexed in name order (determinism). Per node: free CPU and memory, its node pool and the
milli-GPU one device may hand out to fractions (``dev_cap``: 1000, more in an overcommitted pool, see
``pools``). Per device (``nodes x max_gpus``): free milli-GPU (``dev_cap`` when nobody holds it; a
whole GPU takes all of it; -1 marks a device slot the node does not have), a bitmask of used MIG memory
slices and the count of used MIG compute slices. Two per-node summaries are kept in
step so feasibility is one vectorised comparison per job: the number of fully free devices and the
largest free share on any device.

Changes go through :class:`Statement` (Volcano's idea): apply replica placements, then ``commit`` or
``discard``; discarding reverts exactly what was applied.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from .mig import MigGeometry, Slot, default_device_memory_gib, fixed_layout, mig_geometry
from .model import ForeignUsage, GpuNode, ReplicaPlacement, Snapshot
from .pools import FULL, pool_index, share_capacity_milli

__all__ = ["FULL", "Cluster", "Statement"]

_FEW_STALE = 8  # up to this many nodes' bin-packing scores are computed one by one

# The arrays :meth:`Cluster.apply` changes: what :meth:`Cluster.save_free` keeps.
_FREE_STATE = (
    "cpu_free",
    "mem_free",
    "dev_free",
    "mig_mask",
    "mig_compute",
    "full_free",
    "max_share",
    "gpu_free_total",
    "free_bits",
    "free_run",
    "pack_score",
    "cpu_pack_score",
)


class Cluster:
    """Mutable free-capacity view of a snapshot's nodes. Built once per cycle."""

    def __init__(self, snapshot: Snapshot) -> None:
        # GPU model, then name: each model's nodes are one contiguous slice, so per-model feasibility
        # works on array views instead of gathered copies.
        nodes = sorted(snapshot.nodes, key=lambda n: (n.gpu_model is None, n.gpu_model or "", n.name))
        self.nodes: tuple[GpuNode, ...] = tuple(nodes)
        self.index: dict[str, int] = {n.name: i for i, n in enumerate(nodes)}
        n = len(nodes)
        self.n = n
        width = max([node.gpu_count for node in nodes] + [1])
        self.width = width
        model_memory = dict(snapshot.gpu_memory_gib)
        self.models: tuple[str, ...] = tuple(sorted({node.gpu_model for node in nodes if node.gpu_model}))
        model_code = {m: i for i, m in enumerate(self.models)}
        self.model_code = model_code
        self.node_model = np.array(
            [model_code[node.gpu_model] if node.gpu_model else -1 for node in nodes], dtype=np.int32
        )
        self.model_slice: dict[str, tuple[int, int]] = {}
        for i, node in enumerate(nodes):
            if node.gpu_model:
                lo, _ = self.model_slice.get(node.gpu_model, (i, i))
                self.model_slice[node.gpu_model] = (lo, i + 1)
        self.gpu_count = np.array([node.gpu_count for node in nodes], dtype=np.int32)
        self.cpu_total = np.array([node.cpu_milli for node in nodes], dtype=np.int64)
        self.mem_total = np.array([node.memory_mib for node in nodes], dtype=np.int64)
        self.cordoned = np.array([node.unschedulable for node in nodes], dtype=bool)
        self.mig_node = np.array([node.mig_enabled for node in nodes], dtype=bool)
        self.pools = snapshot.pools
        self.node_pool = np.full(n, -1, dtype=np.int32)
        self.dev_cap = np.full(n, FULL, dtype=np.int32)
        if self.pools:
            self.node_pool[:] = [pool_index(dict(node.labels), self.pools) for node in nodes]
            caps = np.array([share_capacity_milli(pool.overcommit_ratio) for pool in self.pools] + [FULL])
            self.dev_cap[:] = np.where(self.mig_node, FULL, caps[self.node_pool])  # -1 (no pool) -> FULL
        self.device_memory_gib = np.array(
            [
                node.gpu_memory_gib
                or model_memory.get(node.gpu_model or "", 0)
                or default_device_memory_gib(node.gpu_model or "")
                for node in nodes
            ],
            dtype=np.int64,
        )
        self._mig_cache: dict[tuple[str, int], MigGeometry | None] = {}
        # Nodes with fixed MIG partitions: their slots per profile (``mig.fixed_layout``).
        self.mig_layout: dict[int, dict[str, tuple[Slot, ...]]] = {
            i: fixed_layout(node.mig_slices, node.gpu_count, int(self.device_memory_gib[i]))
            for i, node in enumerate(nodes)
            if node.mig_enabled and node.mig_slices
        }
        self.mig_fixed = np.zeros(n, dtype=bool)
        self.mig_fixed[list(self.mig_layout)] = True
        # Called as listener(node_index, placement, sign) after every change (stateful scorers).
        self.listeners: list[Callable[[int, ReplicaPlacement, int], None]] = []
        self.model_memory: dict[str, int] = {}
        for i, node in enumerate(nodes):
            if node.gpu_model and node.gpu_model not in self.model_memory:
                self.model_memory[node.gpu_model] = int(self.device_memory_gib[i])
        for model, gib in model_memory.items():
            self.model_memory.setdefault(model, gib)
        self._init_free()

    def _init_free(self) -> None:
        """Everything free: the per-device arrays and the per-node summaries kept in step with them."""
        n, width = self.n, self.width
        self.cpu_free = self.cpu_total.copy()
        self.mem_free = self.mem_total.copy()
        self.dev_free = np.full((n, width), -1, dtype=np.int32)
        for i, node in enumerate(self.nodes):
            self.dev_free[i, : node.gpu_count] = self.dev_cap[i]
        self.mig_mask = np.zeros((n, width), dtype=np.int32)
        self.mig_compute = np.zeros((n, width), dtype=np.int32)
        self.full_free = np.where(self.mig_node, 0, self.gpu_count).astype(np.int32)
        self.max_share = np.where(self.mig_node | (self.gpu_count == 0), 0, self.dev_cap).astype(np.int32)
        self.gpu_free_total = self.gpu_count.astype(np.int64) * self.dev_cap
        # Bit d set when device d is fully free (non-MIG nodes): contiguity tests are shifts and ands.
        self.free_bits = np.where(self.mig_node, 0, (np.int64(1) << self.gpu_count.astype(np.int64)) - 1)
        # The longest run of consecutive fully free devices (the set bits of ``free_bits``): a block of
        # g NVLink neighbours is free where it is at least g (``fit.contiguous``).
        self.free_run = np.where(self.mig_node, 0, self.gpu_count).astype(np.int32)
        self.inv_gpu_total = 1.0 / np.maximum(self.gpu_count.astype(np.int64) * self.dev_cap, 1)
        self.inv_cpu_total = 1.0 / np.maximum(self.cpu_total, 1)
        self._inv_cpu: list[float] = self.inv_cpu_total.tolist()  # as plain numbers, for ``_rescore_stale``
        self._inv_gpu: list[float] = self.inv_gpu_total.tolist()
        # The same static facts as plain numbers, for the one-node updates of ``apply`` (no numpy scalars).
        self._count: list[int] = self.gpu_count.tolist()
        self._mig: list[bool] = self.mig_node.tolist()
        self._cap: list[int] = self.dev_cap.tolist()
        # Nodes a MIG placement was ever applied to (the only ones whose ``mig_mask`` may be non-zero).
        self._masked: set[int] = set(np.flatnonzero(self.mig_node).tolist())
        # Bin-packing score per node (``scorers.score_binpack``'s formula): GPU replicas -(free GPU
        # share) - 0.01 (free CPU share); CPU-only replicas -(free CPU share). ``apply`` lists the nodes
        # it changed, and they are scored again when the scores are next read (``pack_score``).
        self._pack = np.zeros(n, dtype=np.float64)
        self._cpu_pack = np.zeros(n, dtype=np.float64)
        self._pack_stale: list[int] = []
        self._rescore_all()

    # -- geometry -------------------------------------------------------------------------------

    def mig(self, profile: str, device_memory_gib: int) -> MigGeometry | None:
        key = (profile, device_memory_gib)
        if key not in self._mig_cache:
            self._mig_cache[key] = mig_geometry(profile, device_memory_gib)
        return self._mig_cache[key]

    def fixed_slots(self, i: int, profile: str) -> tuple[Slot, ...] | None:
        """The slots of ``profile`` on node ``i`` if its MIG partitions are fixed, else ``None``."""
        layout = self.mig_layout.get(i)
        return None if layout is None else layout.get(profile, ())

    def free_fixed_slot(self, i: int, geometry: MigGeometry) -> Slot | None:
        """The first free slot of ``geometry``'s profile on fixed-partition node ``i``."""
        for d, start in self.mig_layout[i].get(geometry.profile, ()):
            if int(self.mig_mask[i, d]) & geometry.mask_at(start) == 0:
                return d, start
        return None

    def memory_of(self, gpu_model: str) -> int:
        return self.model_memory.get(gpu_model, 0) or default_device_memory_gib(gpu_model)

    # -- applying placements --------------------------------------------------------------------

    def apply(self, placement: ReplicaPlacement, sign: int, refresh: bool = True) -> bool:
        """Take (``sign=1``) or give back (``sign=-1``) one replica's resources. False if node unknown.

        ``refresh=False`` skips the per-node summaries; call :meth:`refresh_all` after a bulk load.
        """
        i = self.index.get(placement.node)
        if i is None:
            return False
        if placement.cpu_milli:  # (subtracting nothing changes nothing: skipped on a hot path)
            self.cpu_free[i] -= sign * placement.cpu_milli
        if placement.memory_mib:
            self.mem_free[i] -= sign * placement.memory_mib
        if placement.gpu_indices:
            if placement.mig_profile is not None:
                geometry = self.mig(placement.mig_profile, int(self.device_memory_gib[i]))
                if geometry is not None:
                    start = placement.mig_slot or 0
                    self._masked.add(i)
                    for d in placement.gpu_indices:
                        if d < self.width:
                            if sign > 0:
                                self.mig_mask[i, d] |= geometry.mask_at(start)
                            else:
                                self.mig_mask[i, d] &= ~geometry.mask_at(start)
                            self.mig_compute[i, d] += sign * geometry.compute
            else:
                # A whole GPU holds all of its device, also where fractions may overcommit it.
                taken = self._cap[i] if placement.gpu_milli >= FULL else placement.gpu_milli
                blocks = self._mig[i] and placement.gpu_milli > 0
                row = self.dev_free[i]
                for d in placement.gpu_indices:
                    if d < self.width:
                        row[d] -= sign * taken
                        if blocks:
                            # A non-MIG holder of a MIG device (a foreign pod) blocks every slice.
                            self.mig_mask[i, d] = 0xFF if sign > 0 else 0
                            self.mig_compute[i, d] = 7 if sign > 0 else 0
            if refresh:
                self._refresh(i)
        if refresh:
            self._pack_stale.append(i)
        for listener in self.listeners:
            listener(i, placement, sign)
        return True

    def take_all(self, placements: Iterable[ReplicaPlacement]) -> None:
        """``apply(p, 1, refresh=False)`` of every placement, in order (a bulk load: call
        :meth:`refresh_all` after): the CPU, memory and device shares of plain placements are
        subtracted in three array operations at the end (sums of whole numbers, so the same arrays);
        MIG slices and holders of MIG devices take :meth:`apply` one by one."""
        nodes: list[int] = []
        cpus: list[int] = []
        mems: list[int] = []
        dev_nodes: list[int] = []
        devs: list[int] = []
        takens: list[int] = []
        index, width, caps, mig, listeners = self.index, self.width, self._cap, self._mig, self.listeners
        for p in placements:
            i = index.get(p.node)
            if i is None:
                continue
            if p.gpu_indices and (p.mig_profile is not None or (mig[i] and p.gpu_milli > 0)):
                self.apply(p, 1, refresh=False)
                continue
            nodes.append(i)
            cpus.append(p.cpu_milli)
            mems.append(p.memory_mib)
            if p.gpu_indices:
                taken = caps[i] if p.gpu_milli >= FULL else p.gpu_milli
                for d in p.gpu_indices:
                    if d < width:
                        dev_nodes.append(i)
                        devs.append(d)
                        takens.append(taken)
            for listener in listeners:
                listener(i, p, 1)
        at = np.array(nodes, dtype=np.intp)
        np.subtract.at(self.cpu_free, at, np.array(cpus, dtype=self.cpu_free.dtype))
        np.subtract.at(self.mem_free, at, np.array(mems, dtype=self.mem_free.dtype))
        rows, cols = np.array(dev_nodes, dtype=np.intp), np.array(devs, dtype=np.intp)
        np.subtract.at(self.dev_free, (rows, cols), np.array(takens, dtype=self.dev_free.dtype))

    def save_free(self) -> tuple[np.ndarray, ...]:
        """A copy of the free capacity (every array ``apply`` changes), for :meth:`restore_free`."""
        return tuple(getattr(self, name).copy() for name in _FREE_STATE)

    def restore_free(self, saved: tuple[np.ndarray, ...], changes: list[tuple[ReplicaPlacement, int]]) -> None:
        """Undo ``changes`` (each placement applied with its sign since ``saved`` was taken, in order):
        the same state and the same listener calls as applying each with the opposite sign, newest
        first, without the per-node arithmetic."""
        self._pack_stale.clear()  # the saved scores were current (``save_free`` reads them)
        for name, array in zip(_FREE_STATE, saved, strict=True):
            getattr(self, name)[...] = array
        for placement, sign in reversed(changes):
            i = self.index.get(placement.node)
            if i is not None:
                for listener in self.listeners:
                    listener(i, placement, -sign)

    def apply_foreign(self, usage: ForeignUsage, refresh: bool = True) -> None:
        self.apply(
            ReplicaPlacement(
                node=usage.node,
                gpu_indices=usage.gpu_indices,
                gpu_milli=usage.gpu_milli,
                cpu_milli=usage.cpu_milli,
                memory_mib=usage.memory_mib,
            ),
            1,
            refresh,
        )

    def _refresh(self, i: int) -> None:
        count = self._count[i]
        if self._mig[i]:
            used = sum(int(m).bit_count() for m in self.mig_mask[i, :count].tolist())
            self.gpu_free_total[i] = (count * 8 - used) * FULL // 8
            return
        row = self.dev_free[i].tolist()
        if count < len(row):
            row = row[:count]
        # Only a node a MIG placement ever touched can have a used slice on a device (``_masked``).
        masks = self.mig_mask[i, :count].tolist() if i in self._masked else None
        cap = self._cap[i]
        bits = run = longest = top = total = 0
        for d, v in enumerate(row):
            if v > 0:
                total += v
                if v > top:
                    top = v
            if v == cap and (masks is None or not masks[d]):
                bits |= 1 << d
                run += 1
                if run > longest:
                    longest = run
            else:
                run = 0
        self.free_bits[i] = bits
        self.free_run[i] = longest
        self.full_free[i] = bits.bit_count()
        self.max_share[i] = top
        self.gpu_free_total[i] = total

    def refresh_all(self) -> None:
        """Recompute every per-node summary from the device arrays (vectorised)."""
        exists = np.arange(self.width)[None, :] < self.gpu_count[:, None]
        free = exists & (self.dev_free == self.dev_cap[:, None]) & (self.mig_mask == 0)
        plain = ~self.mig_node
        self.full_free = np.where(plain, free.sum(axis=1), 0).astype(np.int32)
        self.max_share = np.where(plain & (self.gpu_count > 0), np.clip(self.dev_free.max(axis=1), 0, None), 0)
        self.max_share = self.max_share.astype(np.int32)
        weights = np.left_shift(np.int64(1), np.arange(self.width, dtype=np.int64))
        self.free_bits = np.where(plain, free.astype(np.int64) @ weights, 0)
        # Runs of k + 1 ones survive k shift-and-ands: count the lengths that still have one.
        run, longest = self.free_bits.copy(), np.zeros(self.n, dtype=np.int32)
        for k in range(1, self.width + 1):
            longest += run != 0
            run &= self.free_bits >> k
        self.free_run = longest
        used_slices = np.unpackbits(self.mig_mask.astype(np.uint8)[..., None], axis=-1).sum(axis=(1, 2))
        mig_free = (self.gpu_count.astype(np.int64) * 8 - used_slices) * FULL // 8
        self.gpu_free_total = np.where(plain, np.clip(self.dev_free, 0, None).sum(axis=1), mig_free).astype(np.int64)
        self._rescore_all()

    def _rescore_all(self) -> None:
        self._pack_stale.clear()
        cpu_share = self.cpu_free * self.inv_cpu_total
        self._pack = -(self.gpu_free_total * self.inv_gpu_total) - 0.01 * cpu_share
        self._cpu_pack = -cpu_share

    @property
    def pack_score(self) -> np.ndarray:
        """Per node, the bin-packing score of a GPU replica (read only)."""
        if self._pack_stale:
            self._rescore_stale()
        return self._pack

    @property
    def cpu_pack_score(self) -> np.ndarray:
        """Per node, the bin-packing score of a CPU-only replica (read only)."""
        if self._pack_stale:
            self._rescore_stale()
        return self._cpu_pack

    def pack_scores_at(self, nodes: np.ndarray, cpu: bool) -> np.ndarray:
        """:attr:`pack_score` (``cpu``: :attr:`cpu_pack_score`) of the nodes ``nodes`` (an index array),
        computed from the free arrays: the same formula on the same numbers, so the same floats, without
        rescoring every node changed since the scores were last read (a few candidates, e.g. MIG nodes,
        after many placements elsewhere)."""
        cpu_share = self.cpu_free[nodes] * self.inv_cpu_total[nodes]
        if cpu:
            return -cpu_share
        return -(self.gpu_free_total[nodes] * self.inv_gpu_total[nodes]) - 0.01 * cpu_share

    def _rescore_stale(self) -> None:
        """:meth:`_rescore_all` of the nodes changed since the scores were last read: the same formula
        on the same numbers, so the same floats."""
        stale, self._pack_stale = self._pack_stale, []
        if len(stale) <= _FEW_STALE:  # a placement or two since the last read: plain numbers
            cpu_free, gpu_free, inv_cpu, inv_gpu = self.cpu_free, self.gpu_free_total, self._inv_cpu, self._inv_gpu
            for i in stale:
                cpu_share = cpu_free.item(i) * inv_cpu[i]
                self._pack[i] = -(gpu_free.item(i) * inv_gpu[i]) - 0.01 * cpu_share
                self._cpu_pack[i] = -cpu_share
            return
        nodes = np.array(stale, dtype=np.int64)
        shares = self.cpu_free[nodes] * self.inv_cpu_total[nodes]
        self._pack[nodes] = -(self.gpu_free_total[nodes] * self.inv_gpu_total[nodes]) - 0.01 * shares
        self._cpu_pack[nodes] = -shares

    # -- summaries ------------------------------------------------------------------------------

    def label_codes(self, key: str) -> tuple[np.ndarray, tuple[str, ...]]:
        """Per-node integer code of a label's value (-1 when absent) and the value table."""
        per_node = [dict(node.labels).get(key, "") for node in self.nodes]
        values = sorted(set(per_node) - {""})
        code = {v: j for j, v in enumerate(values)}
        arr = np.array([code.get(value, -1) for value in per_node], dtype=np.int32)
        return arr, tuple(values)


class Statement:
    """Staged changes to a :class:`Cluster`; ``discard`` reverts them in reverse order."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.ops: list[tuple[ReplicaPlacement, int]] = []

    def take(self, placement: ReplicaPlacement) -> None:
        self.cluster.apply(placement, 1)
        self.ops.append((placement, 1))

    def give_back(self, placement: ReplicaPlacement) -> None:
        self.cluster.apply(placement, -1)
        self.ops.append((placement, -1))

    def discard(self) -> None:
        for placement, sign in reversed(self.ops):
            self.cluster.apply(placement, -sign)
        self.ops.clear()

    def commit(self) -> None:
        self.ops.clear()
