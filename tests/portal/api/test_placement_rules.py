"""Placement rules and node pools through the API: a 400 naming the field for what Kubernetes would
refuse, nothing stored then; accepted rules stored, shown back, obeyed by the cycle and explained."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.test import TestCase
from django.utils import timezone

from portal.jobs.models import Job
from scheduling.adapters.simulated import SimulatedCluster
from scheduling.models import NodePool, SimNode
from scheduling.services import cycle_run

pytestmark = pytest.mark.django_db

JOB = {"queue": "default", "image": "pytorch:2.4", "gpu": 1}
REQ = "requiredDuringSchedulingIgnoredDuringExecution"
SEED = {
    "nodeAffinity": {
        REQ: {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "gpu-type", "operator": "In", "values": ["A100", "H100"]}]}
            ]
        }
    }
}


def submit(client, **fields):
    return client.post("/api/v1/jobs/", {**JOB, **fields}, format="json")


def run_cycle():
    with TestCase.captureOnCommitCallbacks(execute=True):
        cycle_run(now=timezone.now(), backend=SimulatedCluster())


@pytest.mark.parametrize(
    ("fields", "field", "detail"),
    [
        (
            {"affinity": {"nodeAffinity": {REQ: {"nodeSelectorTerms": []}}}},
            "affinity",
            "nodeSelectorTerms: at least 1 entry",
        ),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        REQ: {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [{"key": "gpu-count", "operator": "Gt", "values": ["four"]}]}
                            ]
                        }
                    }
                }
            },
            "affinity",
            "Gt compares integers: 'four' is not one",
        ),
        ({"affinity": {"podAffinity": {}}}, "affinity", "pod affinity is not supported"),
        ({"affinity": "gpu-type=A100"}, "affinity", None),
        (
            {"topology_spread_constraints": [{"maxSkew": 1, "topologyKey": "zone"}]},
            "topology_spread_constraints",
            "whenUnsatisfiable: expected a string",
        ),
        (
            {
                "topology_spread_constraints": [
                    {"maxSkew": 1, "topologyKey": "z", "whenUnsatisfiable": "DoNotSchedule"}
                ]
                * 5
            },
            "topology_spread_constraints",
            None,
        ),
        ({"required_topology": "two racks"}, "required_topology", "'two racks' is not node, rack, zone, nvlink"),
    ],
)
def test_rules_kubernetes_would_refuse_are_a_400_naming_the_field_and_nothing_is_stored(api, fields, field, detail):
    response = submit(api("alice"), **fields)
    assert response.status_code == 400, response.json()
    assert field in response.json()["errors"]
    if detail:
        assert detail in response.json()["detail"]
    assert Job.objects.count() == 0


def test_accepted_rules_are_stored_shown_back_and_obeyed(api, world):
    SimNode.objects.filter(name="a100-0").update(labels={"gpu-type": "V100"})
    SimNode.objects.filter(name="a100-1").update(labels={"gpu-type": "A100"})
    response = submit(api("alice"), affinity=SEED, replicas=2, required_topology="node")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["affinity"] == SEED
    assert body["required_topology"] == "node"
    run_cycle()
    job = Job.objects.get()
    assert job.state in ("Admitted", "Running")
    assert {p.node for p in job.placements.all()} == {"a100-1"}


def test_a_job_no_node_matches_is_a_400_naming_its_affinity_or_queues_when_the_cluster_autoscales(api, world, settings):
    response = submit(api("alice"), affinity=SEED)
    assert response.status_code == 400
    assert response.json()["errors"]["affinity"] == [
        (
            "placement: never fits as configured: on A100-80GB: none of the 2 A100-80GB nodes passes the job's "
            "filters: 2 not matching node affinity gpu-type In [A100, H100]; on T4: none of the 1 T4 node passes "
            "the job's filters: 1 not matching node affinity gpu-type In [A100, H100]"
        )
    ]
    assert Job.objects.count() == 0
    settings.QUEUE_NEVER_FITTING_JOBS = True
    assert submit(api("alice"), affinity=SEED).status_code == 201
    run_cycle()
    job = Job.objects.get()
    assert job.state == "Pending"
    assert job.pending_reason["waits"] is False
    assert "not matching node affinity gpu-type In [A100, H100]" in job.pending_reason["message"]


def test_a_pools_overcommit_lets_more_fractions_share_a_device_while_quota_counts_requests(api, world):
    SimNode.objects.exclude(name="a100-0").delete()
    SimNode.objects.filter(name="a100-0").update(gpu_count=1, labels={"pool": "notebooks"})
    NodePool.objects.create(name="notebooks", node_selector={"pool": "notebooks"}, overcommit_ratio=Decimal("1.2"))
    for _ in range(6):
        assert submit(api("alice"), gpu=0, gpu_milli=240).status_code == 201
    run_cycle()
    states = sorted(Job.objects.values_list("state", flat=True))
    assert states.count("Pending") == 1
    assert sum(p.gpu_milli for j in Job.objects.exclude(state="Pending") for p in j.placements.all()) == 1200
    # Quota counts the requested 0.24 per notebook.
    assert [j.gpu_share_per_replica for j in Job.objects.all()] == [0.24] * 6
