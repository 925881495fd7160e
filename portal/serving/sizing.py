"""Pure rules of inference services: the GPU memory a model needs, and the autoscaler's arithmetic.

GPU memory: the seeds' figures for 16-bit weights (7B about 13 GiB, 13B about 26 GiB, 70B about
140 GiB, so 2 x 80 GB GPUs or more); other sizes at 2 GiB per billion parameters, rounded up. The
engine turns GPU memory into a GPU count per model (``gpu_memory_gib``).

The autoscaler, as Kubernetes' HorizontalPodAutoscaler computes it:

1. ``recommend``: ``ceil(load / target)`` replicas, within ``[min, max]`` (no load: ``min``).
2. ``stabilize``: scaling up takes the new recommendation at once; scaling down takes the highest
   recommendation of the stabilization window (default 300 s), so a dip shorter than the window
   never removes a replica and the count does not flap.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

MODEL_MEMORY_GIB = {7: 13, 13: 26, 70: 140}
GIB_PER_BILLION = 2
MAX_MODEL_SIZE_B = 2000


def model_memory_gib(size_b: int) -> int:
    """GPU memory (GiB) one replica of a ``size_b``-billion-parameter model needs."""
    return MODEL_MEMORY_GIB.get(size_b, math.ceil(size_b * GIB_PER_BILLION))


def recommend(*, load: float, target: float, min_replicas: int, max_replicas: int) -> int:
    """Step 1: replicas for ``load`` at ``target`` per replica, within the bounds."""
    wanted = math.ceil(load / target - 1e-9) if load > 0 else 0
    return max(min_replicas, min(max_replicas, wanted))


def stabilize(*, current: int, recommended: int, window: Iterable[int]) -> int:
    """Step 2: the replicas to run given the current count, the new recommendation and the
    recommendations made within the scale-down stabilization window."""
    if recommended >= current:
        return recommended
    return min(current, max([recommended, *window]))
