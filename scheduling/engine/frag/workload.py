"""The target workload FGD plans for: the typical pods, and their array form for the measures.

``typical_pods`` builds the table as the reference simulator does: distinct resource shapes
``(cpu_milli, gpu_milli, gpu_count, allowed_models)`` counted over a pod list, sorted by count (then by
shape, both descending), kept until their cumulative count reaches ``popularity`` (the paper's 95 %)
of all pods, frequencies renormalised over the kept shapes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from .arrays import MILLI

DEFAULT_POPULARITY = 0.95  # the paper's typical-pod coverage threshold

Shape4 = tuple[int, int, int, tuple[str, ...]]
"""A pod's resource shape: ``(cpu_milli, gpu_milli per device, gpu_count, allowed_models)``."""


@dataclass(frozen=True, slots=True)
class TypicalPod:
    cpu_milli: int
    gpu_milli: int
    gpu_count: int
    allowed_models: tuple[str, ...]
    frequency: float  # 0..1, sums to 1 over the list


def typical_pods(requests: Iterable[Shape4], *, popularity: float = DEFAULT_POPULARITY) -> tuple[TypicalPod, ...]:
    """The target workload of ``requests`` (one shape per pod; see the module docstring)."""
    counts: dict[Shape4, float] = {}
    total = 0.0
    # Requests repeat a lot: count the distinct ones first (in order of first appearance), then merge.
    for (cpu, milli, num, models), n in Counter(requests).items():
        key = (int(cpu), int(milli), int(num), tuple(models))
        counts[key] = counts.get(key, 0.0) + float(n)
        total += float(n)
    if not counts:
        return ()
    # Go: sort.Reverse on (count, then cpu, milli, num, model string) ascending.
    ordered = sorted(counts.items(), key=lambda kv: (kv[1], kv[0][0], kv[0][1], kv[0][2], "|".join(kv[0][3])))
    ordered.reverse()
    expected = popularity * total
    kept: list[tuple[Shape4, float]] = []
    cum = 0.0
    for key, cnt in ordered:
        if cum >= expected:
            break
        kept.append((key, cnt))
        cum += cnt
    return tuple(TypicalPod(k[0], k[1], k[2], k[3], cnt / cum) for k, cnt in kept)


@dataclass(frozen=True, slots=True)
class TypicalArrays:
    """The GPU typical pods as arrays (``T`` of them), plus the frequency of the CPU-only ones."""

    cpu: np.ndarray  # (T,)
    milli: np.ndarray  # (T,) > 0 (GPU typical pods only)
    num: np.ndarray  # (T,)
    freq: np.ndarray  # (T,)
    access: np.ndarray  # (M + 1, T) bool; row M is the CPU-only node
    cpu_only_freq: float  # total frequency of CPU-only typical pods: always count the whole free GPU
    any_access: bool  # every typical pod may use every node (no GPU-model restrictions)
    umilli: np.ndarray  # (U,) distinct gpu_milli
    uidx: np.ndarray  # (T,) index into umilli

    @classmethod
    def build(cls, typical: Sequence[TypicalPod], models: tuple[str, ...]) -> TypicalArrays:
        """``models`` are the cluster's GPU models (``NodeArrays.models``), in row order of ``access``."""
        gpu = [t for t in typical if t.gpu_milli > 0]
        access = np.ones((len(models) + 1, len(gpu)), dtype=bool)
        for j, t in enumerate(gpu):
            if t.allowed_models:
                for i, m in enumerate(models):
                    access[i, j] = m in t.allowed_models
                access[len(models), j] = False
        distinct = sorted({t.gpu_milli for t in gpu})
        return cls(
            cpu=np.array([t.cpu_milli for t in gpu], dtype=np.int64),
            milli=np.array([t.gpu_milli for t in gpu], dtype=np.int64),
            num=np.array([t.gpu_count for t in gpu], dtype=np.int64),
            freq=np.array([t.frequency for t in gpu], dtype=np.float64),
            access=access,
            cpu_only_freq=float(sum(t.frequency for t in typical if t.gpu_milli == 0)),
            any_access=bool(access.all()),
            umilli=np.array(distinct, dtype=np.int64),
            uidx=np.array([distinct.index(t.gpu_milli) for t in gpu], dtype=np.int64),
        )

    @property
    def shares(self) -> np.ndarray:
        """Per typical pod, whether it takes a share of one device (not whole devices)."""
        return self.milli < MILLI
