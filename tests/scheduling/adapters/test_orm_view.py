"""The pages' values-only snapshot (``orm.snapshot_view_load``) against the cycle's (``snapshot_load``):
the same queue standings and cluster occupancy from the same rows."""

from __future__ import annotations

import pytest

from scheduling.adapters.factory import cluster_backend
from scheduling.adapters.orm import snapshot_load, snapshot_view_load
from scheduling.engine.occupancy import cluster_occupancy
from scheduling.engine.standing import queue_standings
from scheduling.models import SimNode
from tests.portal.ops.placing import place

pytestmark = pytest.mark.django_db


def test_the_pages_snapshot_gives_the_same_standings_and_occupancy_as_the_cycles(world):
    SimNode.objects.filter(name="a100-1").update(mig_enabled=True)
    place(world.submit("vision", gpu=2), "a100-0", (0, 1))
    place(world.submit("nlp", gpu=0, gpu_milli=300), "a100-0", (2,), milli=300)
    place(world.submit("vision", gpu=0, mig_profile="1g.10gb"), "a100-1", (0,), milli=0, mig="1g.10gb", slot=0)
    world.submit("vision", gpu=1, replicas=2, allowed_gpu_models=[world.models["T4"]])
    world.submit("nlp", gpu=0, gpu_memory_gib=100)
    backend = cluster_backend()
    cycle, view = snapshot_load(backend=backend), snapshot_view_load(backend=backend)
    assert queue_standings(view) == queue_standings(cycle)
    assert cluster_occupancy(view) == cluster_occupancy(cycle)
    assert [(w.id, w.state, w.placements, w.allowed_gpu_models) for w in view.workloads] == [
        (w.id, w.state, w.placements, w.allowed_gpu_models) for w in cycle.workloads
    ]
