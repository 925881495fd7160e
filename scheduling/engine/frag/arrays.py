"""The cluster and a pod as the FGD paper's simulator sees them: plain numpy arrays, no MIG.

A node has a GPU model (or none), a number of devices, CPU and memory; a pod asks for CPU, memory and
``gpu_count`` devices with ``gpu_milli`` each (a share of one device below 1000, else whole devices).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

POLICIES: tuple[str, ...] = ("fgd", "random", "dotprod", "clustering", "packing", "bestfit", "portal")

MILLI = 1000


@dataclass(frozen=True, slots=True)
class PodShape:
    """One pod's request. ``gpu_milli`` is per device; 0 with ``gpu_count == 0`` for CPU-only pods.

    Named apart from the engine's ``Workload`` (a job of replicas) and ``fit.Shape`` (a replica on one
    GPU model): this is the paper's pod, which is also what a trace row asks for.
    """

    cpu_milli: int
    memory_mib: int = 0
    gpu_milli: int = 0
    gpu_count: int = 0
    allowed_models: tuple[str, ...] = ()

    @property
    def is_sharing(self) -> bool:
        return self.gpu_count == 1 and 0 < self.gpu_milli < MILLI

    @property
    def total_gpu_milli(self) -> int:
        return self.gpu_milli * self.gpu_count


@dataclass(frozen=True, slots=True)
class Choice:
    """Where a pod goes: ``node`` indexes ``NodeArrays.names``; the devices it takes; the node's score."""

    node: int
    gpu_indices: tuple[int, ...] = ()
    score: float = 0.0


@dataclass(frozen=True, slots=True)
class NodeArrays:
    """Static description of the nodes. Arrays are never mutated (scorers copy what they change)."""

    names: tuple[str, ...]
    models: tuple[str, ...]  # distinct GPU models; ``model_ids`` index it, -1 = CPU-only node
    model_ids: np.ndarray  # (N,) int
    gpu_count: np.ndarray  # (N,) int
    cpu_milli: np.ndarray  # (N,) int64 capacity
    memory_mib: np.ndarray  # (N,) int64 capacity

    @classmethod
    def of(cls, rows: Iterable[tuple[str, str | None, int, int, int]]) -> NodeArrays:
        """Rows are ``(name, gpu_model or None, gpu_count, cpu_milli, memory_mib)``."""
        rows = list(rows)
        models = tuple(sorted({m for _, m, g, _, _ in rows if m and g > 0}))
        index = {m: i for i, m in enumerate(models)}
        return cls(
            names=tuple(r[0] for r in rows),
            models=models,
            model_ids=np.array([index.get(m, -1) if m and g > 0 else -1 for _, m, g, _, _ in rows], dtype=np.int64),
            gpu_count=np.array([r[2] for r in rows], dtype=np.int64),
            cpu_milli=np.array([r[3] for r in rows], dtype=np.int64),
            memory_mib=np.array([r[4] for r in rows], dtype=np.int64),
        )

    def __len__(self) -> int:
        return len(self.names)

    @property
    def max_gpus(self) -> int:
        return max(1, int(self.gpu_count.max(initial=0)))

    def total_gpu_milli(self) -> int:
        return int(self.gpu_count.sum()) * MILLI
