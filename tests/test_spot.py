"""Spot capacity end to end on the simulated cluster: opt in, run on the spot node at the spot price,
lose the node, get requeued with the reason, and be billed up to the notice only."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.models import PriceBookEntry
from billing.services import metering_run, price_book_seed_defaults
from portal.jobs.models import JobAttempt
from scheduling.adapters.simulated import SimulatedCluster
from scheduling.models import SimNode
from scheduling.services import cycle_run

pytestmark = pytest.mark.django_db


def spot_node(world, name="spot-0"):
    return SimNode.objects.create(
        name=name,
        gpu_model=world.models["A100-80GB"],
        gpu_count=8,
        cpu_milli=96_000,
        memory_mib=1024 * 1024,
        labels={"karpenter.sh/capacity-type": "spot"},
        taints=[{"key": "spot", "value": "true", "effect": "NoSchedule"}],
    )


def price(resource, capacity_type, model=""):
    return PriceBookEntry.objects.get(resource=resource, gpu_model=model, capacity_type=capacity_type).usd_per_hour


@pytest.fixture
def spot_world(world):
    """The test world with its on-demand nodes replaced by one spot node."""
    SimNode.objects.all().delete()
    spot_node(world)
    price_book_seed_defaults()
    return world


def test_only_jobs_that_opt_in_run_on_the_tainted_spot_node(api, spot_world, settings):
    settings.QUEUE_NEVER_FITTING_JOBS = True  # the plain job fits no node here; keep it to show it waits
    alice = api("alice")
    body = {"queue": "default", "image": "pytorch:2.4", "gpu": 4}
    plain = alice.post("/api/v1/jobs/", body, format="json").json()["id"]
    spot = alice.post("/api/v1/jobs/", {**body, "spot": True}, format="json").json()["id"]
    cycle_run(now=timezone.now(), backend=SimulatedCluster())
    assert alice.get(f"/api/v1/jobs/{plain}/").json()["state"] == "Pending"
    job = alice.get(f"/api/v1/jobs/{spot}/").json()
    assert job["state"] == "Admitted"
    assert job["capacity_type"] == "spot"


def test_a_reclaimed_spot_node_requeues_its_job_billed_up_to_the_notice_at_the_spot_price(api, spot_world):
    alice = api("alice")
    body = {"queue": "default", "image": "pytorch:2.4", "gpu": 8, "cpu_milli": 2000, "memory_mib": 4096}
    job_id = alice.post(
        "/api/v1/jobs/", {**body, "spot": True, "runtime_s": 36000, "checkpoint_path": "s3://ckpt/j"}, format="json"
    ).json()["id"]
    backend = SimulatedCluster(speedup=1)
    start = (timezone.now() - timedelta(hours=2)).replace(microsecond=0)
    cycle_run(now=start, backend=backend)
    cycle_run(now=start + timedelta(seconds=1), backend=backend)
    notice = start + timedelta(minutes=30)
    node = SimNode.objects.get(name="spot-0")
    node.taints = [
        *node.taints,
        {"key": "karpenter.sh/disrupted", "effect": "NoSchedule", "timeAdded": notice.isoformat()},
    ]
    node.save()
    cycle_run(now=start + timedelta(minutes=50), backend=backend)  # seen 20 minutes after the notice

    job = alice.get(f"/api/v1/jobs/{job_id}/").json()
    assert job["state"] == "Pending"  # no other node: it waits for capacity
    assert job["message"].startswith("interrupted by spot reclaim: node spot-0 reclaimed (karpenter.sh/disrupted)")
    assert job["message"].endswith("resume from checkpoint s3://ckpt/j")
    (attempt,) = JobAttempt.objects.filter(job_id=job_id)
    assert attempt.ended_at == notice
    metering_run()
    job = alice.get(f"/api/v1/jobs/{job_id}/").json()
    hours = Decimal("0.5")  # start to notice, not to when the loss was seen
    assert Decimal(job["gpu_hours"]) == 8 * hours
    expected = (
        8 * hours * price("gpu", "spot", "A100-80GB")
        + 2 * hours * price("cpu", "spot")
        + 4 * hours * price("memory", "spot")
    )
    assert Decimal(job["cost_usd"]) == expected.quantize(Decimal(job["cost_usd"]))


def test_a_deleted_spot_node_requeues_its_job_even_with_restart_policy_never(api, spot_world):
    alice = api("alice")
    body = {"queue": "default", "image": "pytorch:2.4", "gpu": 8, "spot": True, "restart_policy": "never"}
    job_id = alice.post("/api/v1/jobs/", {**body, "runtime_s": 36000}, format="json").json()["id"]
    backend = SimulatedCluster(speedup=1)
    now = timezone.now()
    cycle_run(now=now, backend=backend)
    SimNode.objects.filter(name="spot-0").delete()
    cycle_run(now=now + timedelta(minutes=5), backend=backend)
    job = alice.get(f"/api/v1/jobs/{job_id}/").json()
    assert job["state"] == "Pending"
    assert job["message"] == "interrupted by spot reclaim: node spot-0 lost; requeued"


def test_a_spot_job_prefers_the_spot_node_and_a_plain_job_the_on_demand_one(api, spot_world):
    SimNode.objects.create(
        name="a-on-demand",  # first in node order, so order alone would pick it
        gpu_model=spot_world.models["A100-80GB"],
        gpu_count=8,
        cpu_milli=96_000,
        memory_mib=1024 * 1024,
        labels={"karpenter.sh/capacity-type": "on-demand"},
    )
    alice = api("alice")
    body = {"queue": "default", "image": "pytorch:2.4", "gpu": 2}
    spot = alice.post("/api/v1/jobs/", {**body, "spot": True}, format="json").json()["id"]
    plain = alice.post("/api/v1/jobs/", body, format="json").json()["id"]
    cycle_run(now=timezone.now(), backend=SimulatedCluster())
    assert alice.get(f"/api/v1/jobs/{spot}/").json()["placements"][0]["node"] == "spot-0"
    assert alice.get(f"/api/v1/jobs/{plain}/").json()["placements"][0]["node"] == "a-on-demand"
