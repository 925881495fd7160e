"""The target workload FGD plans for (scheduling.engine.frag.workload)."""

from __future__ import annotations

import pytest

from scheduling.engine.frag import typical_pods


def test_typical_pods_keep_the_most_popular_shapes_until_the_threshold():
    shapes = [(1000, 500, 1, ())] * 6 + [(2000, 1000, 1, ())] * 3 + [(4000, 1000, 8, ())]
    table = typical_pods(shapes, popularity=0.85)
    assert [(t.cpu_milli, t.gpu_count) for t in table] == [(1000, 1), (2000, 1)]
    assert sum(t.frequency for t in table) == pytest.approx(1.0)
    assert table[0].frequency == pytest.approx(6 / 9)
