"""Node pools (KAI/Run:ai): which pool a node is in, and how much of a device fractions may share there.

1. A node is in the first pool, in the snapshot's order, whose ``node_selector`` it matches (it has
   every label with that value); a node that matches none is in no pool and gets the policy's
   placement and no overcommit.
2. A pool's ``placement`` (``binpack``, ``spread``, ``fgd``, ...) chooses among its nodes;
   ``votes.Votes.score`` scales each pool's vote over that pool's candidates.
3. ``overcommit_ratio`` r ≥ 1 lets *fractional* requests (``gpu_milli``) share one device up to
   ``floor(1000·r)`` milli: at 1.2, five 0.24-GPU notebooks on one device. Whole GPUs still need a
   device nobody holds, and a device that holds a whole GPU takes no fraction; MIG devices are not
   overcommitted. Quota and cost count what was requested (0.24 each), never the overcommitted
   capacity.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from .model import NodePool

FULL = 1000
MAX_OVERCOMMIT = 4.0


def pool_index(labels: Mapping[str, str], pools: tuple[NodePool, ...]) -> int:
    """The index of the first pool whose selector ``labels`` match, -1 for none."""
    for i, pool in enumerate(pools):
        if all(labels.get(key) == value for key, value in pool.node_selector):
            return i
    return -1


def share_capacity_milli(ratio: float) -> int:
    """Milli-GPU of fractions one device may hold in a pool with this overcommit ratio (at least
    1000; ratios above ``MAX_OVERCOMMIT`` are held to it)."""
    bounded = min(max(ratio, 1.0), MAX_OVERCOMMIT) if math.isfinite(ratio) else 1.0
    return max(FULL, math.floor(bounded * FULL + 1e-9))
