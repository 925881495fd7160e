"""The capacity signal end to end: a gang waits for capacity, the cycle sizes the nodes that would let
it start, and /metrics, the API and the queues page say so (each team sees its own jobs' requests)."""

from __future__ import annotations

import pytest
from django.test import TestCase
from django.utils import timezone

from scheduling.adapters.simulated import SimulatedCluster
from scheduling.services import cycle_run

pytestmark = pytest.mark.django_db


def fill_and_wait(world):
    """Both 8-GPU A100 nodes busy; a 2 x 8-GPU training gang and a 4-GPU job wait for capacity."""
    world.cluster_queues["vision"].flavors.filter(gpu_model=world.models["A100-80GB"]).update(nominal_gpus=64)
    for _ in range(2):
        world.submit(gpu=8, allowed_gpu_models=(world.models["A100-80GB"],))
    gang = world.submit(kind="training", replicas=2, gpu=8, allowed_gpu_models=(world.models["A100-80GB"],))
    small = world.submit(gpu=4, allowed_gpu_models=(world.models["A100-80GB"],))
    with TestCase.captureOnCommitCallbacks(execute=True):
        cycle_run(now=timezone.now(), backend=SimulatedCluster())
    gang.refresh_from_db()
    small.refresh_from_db()
    return gang, small


def test_a_waiting_gang_says_how_many_nodes_of_which_pool_would_start_it(world):
    gang, small = fill_and_wait(world)
    # Two 8-GPU replicas need two 8-GPU nodes; a 4-GPU replica needs one (the world has no pools).
    assert gang.pending_reason["details"].get("provision_nodes") == 2, gang.pending_reason
    assert gang.pending_reason["details"]["provision_gpu_model"] == "A100-80GB"
    assert gang.pending_reason["message"].endswith("2 more A100-80GB nodes of no pool (like a100-0) would let it start")
    assert small.pending_reason["details"]["provision_nodes"] == 1


def test_metrics_api_and_queues_page_show_the_signal_by_pool(world, client, api, settings):
    fill_and_wait(world)
    settings.METRICS_TOKEN = "t"
    body = client.get("/metrics", headers={"Authorization": "Bearer t"}).content.decode()
    assert 'portal_capacity_wanted_nodes{gpu_model="A100-80GB",pool=""} 3.0' in body  # 2 + 1
    assert 'portal_capacity_wanted_largest_nodes{gpu_model="A100-80GB",pool=""} 2.0' in body
    assert 'portal_capacity_waiting_workloads{gpu_model="A100-80GB",pool=""} 2.0' in body

    mine = api("alice").get("/api/v1/capacity/").json()["results"]
    assert mine == [{"pool": "", "gpu_model": "A100-80GB", "jobs": 2, "nodes": 3, "largest": 2}]
    assert api("bob").get("/api/v1/capacity/").json()["results"] == []  # another team's jobs

    client.force_login(world.users["alice"])
    page = client.get("/queues/").content.decode()
    assert "Capacity wanted" in page
    assert "<td>(no pool)</td><td>A100-80GB</td><td>2</td><td>3</td><td>2 nodes</td>" in page

    # Bob's teams have no job waiting; another team's do: his page must not say that no job waits.
    client.force_login(world.users["bob"])
    page = client.get("/queues/").content.decode()
    assert "No job is waiting for capacity" not in page
    assert "None of your teams' jobs is waiting for capacity that new nodes would cure" in page
    assert "{#" not in page  # the template's comment stays out
    assert "include with capacity_wanted" not in page
    # A platform admin counts every team's jobs.
    client.force_login(world.users["admin"])
    page = client.get("/queues/").content.decode()
    assert "<td>(no pool)</td><td>A100-80GB</td><td>2</td><td>3</td><td>2 nodes</td>" in page
    assert "None of your teams" not in page
