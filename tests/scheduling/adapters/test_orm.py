"""``scheduling.adapters.orm``: a job's placement rules, the pools and the team allow-list reach the
snapshot; rules are read once per job, an edited row is read again, a corrupt one runs nowhere."""

from __future__ import annotations

from decimal import Decimal

import pytest

from portal.jobs.models import Job
from portal.tenants.models import TolerationGrant
from scheduling.adapters import orm
from scheduling.adapters.simulated import SimulatedCluster
from scheduling.engine.model import NodePool as EnginePool
from scheduling.engine.model import NodeSelectorTerm, PlacementRules, Requirement
from scheduling.engine.model import TolerationGrant as EngineGrant
from scheduling.models import NodePool

pytestmark = pytest.mark.django_db

REQ = "requiredDuringSchedulingIgnoredDuringExecution"
A100 = {
    "nodeAffinity": {
        REQ: {"nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100"]}]}]}
    }
}


def workload(snapshot, job):
    return next(w for w in snapshot.workloads if w.id == str(job.pk))


@pytest.fixture(autouse=True)
def _queue_jobs_no_node_matches(settings):
    settings.QUEUE_NEVER_FITTING_JOBS = True  # these jobs' affinity matches no node of the test cluster


def test_rules_pools_and_grants_reach_the_snapshot(world, settings):
    job = world.submit(gpu=1, affinity=A100, required_topology="rack")
    plain = world.submit(gpu=1)
    NodePool.objects.create(
        name="shared", node_selector={"pool": "shared"}, placement="spread", overcommit_ratio=Decimal("1.25")
    )
    TolerationGrant.objects.create(team=world.teams["vision"], key="spot", effect="NoSchedule")
    snapshot = orm.snapshot_load(backend=SimulatedCluster())
    assert workload(snapshot, job).rules == PlacementRules(
        required_terms=(NodeSelectorTerm((Requirement("gpu", "In", ("a100",)),)),), required_topology="rack"
    )
    assert workload(snapshot, plain).rules is None
    assert snapshot.pools == (EnginePool("shared", (("pool", "shared"),), "spread", 1.25),)
    # Every team may tolerate the spot taint (``spot: true``); other taints only when granted.
    spot = EngineGrant(settings.SPOT_TAINT_KEY)
    assert dict(snapshot.toleration_grants or ()) == {
        "nlp": (spot,),
        "vision": (EngineGrant("spot", "", "NoSchedule"), spot),
    }


def test_an_edited_row_is_read_again_and_a_corrupt_one_matches_no_node(world):
    job = world.submit(gpu=1, affinity=A100)
    orm.snapshot_load(backend=SimulatedCluster())
    job.affinity = {
        "nodeAffinity": {
            REQ: {"nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "Gt", "values": ["x"]}]}]}
        }
    }
    job.save()  # as the admin saves it: around the submit path's checks
    rules = workload(orm.snapshot_load(backend=SimulatedCluster()), job).rules
    assert rules == PlacementRules(required_terms=())
    # A queryset update does not move updated_at: the rules read before still hold (they never change).
    Job.objects.filter(pk=job.pk).update(message="x")
    assert workload(orm.snapshot_load(backend=SimulatedCluster()), job).rules == rules
