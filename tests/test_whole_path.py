"""The whole path to the bill: API submit → engine → simulated cluster → metering → cost allocation."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.services import metering_run, price_book_seed_defaults
from scheduling.adapters.simulated import SimulatedCluster
from scheduling.services import cycle_run

pytestmark = pytest.mark.django_db


def test_a_labelled_job_is_billed_and_shows_up_by_label_and_namespace(api, world):
    price_book_seed_defaults()
    alice = api("alice")
    body = {"queue": "default", "image": "pytorch:2.4", "gpu": 2, "runtime_s": 3600, "labels": {"project": "atlas"}}
    job_id = alice.post("/api/v1/jobs/", body, format="json").json()["id"]
    backend = SimulatedCluster(speedup=1)  # one real hour of requested runtime
    start = timezone.now() - timedelta(hours=3)
    cycle_run(now=start, backend=backend)
    cycle_run(now=start + timedelta(seconds=1), backend=backend)
    cycle_run(now=start + timedelta(hours=2), backend=backend)
    assert alice.get(f"/api/v1/jobs/{job_id}/").json()["state"] == "Succeeded"
    assert metering_run() == 1

    by_label = alice.get("/api/v1/cost/allocation?window=1d&aggregate=label:project").json()
    atlas = by_label["totals"]["atlas"]
    assert atlas["gpuHours"] == pytest.approx(2.0)  # 2 GPUs x 1 h
    assert atlas["gpuCost"] > 0
    by_namespace = alice.get("/api/v1/cost/allocation?window=1d&aggregate=namespace").json()
    assert by_namespace["totals"]["team-vision"]["gpuHours"] == pytest.approx(2.0)
    # bob's team sees none of it
    bob = api("bob").get("/api/v1/cost/allocation?window=1d&aggregate=namespace").json()
    assert "team-vision" not in bob["totals"]


def test_an_off_peak_job_waits_for_the_night_and_is_billed_at_the_off_peak_price(api, world, settings):
    """Submitted at noon, it waits for 20:00 (the reason and estimated start say so), runs at night on
    on-demand A100s and is billed at the price book's off-peak price: 70 % of the on-demand list price."""
    settings.OFFPEAK_HOURS, settings.OFFPEAK_TIMEZONE = "20:00-08:00", "UTC"
    price_book_seed_defaults()
    alice = api("alice")
    body = {"queue": "default", "image": "pytorch:2.4", "gpu": 2, "runtime_s": 3600, "off_peak": True}
    job_id = alice.post("/api/v1/jobs/", body, format="json").json()["id"]
    noon = (timezone.now() - timedelta(days=2)).replace(hour=12, minute=0, second=0, microsecond=0)
    backend = SimulatedCluster(speedup=1)
    cycle_run(now=noon, backend=backend)
    job = alice.get(f"/api/v1/jobs/{job_id}/").json()
    assert (job["state"], job["pending_reason"]["kind"]) == ("Pending", "window")
    assert job["estimated_start"].startswith(noon.replace(hour=20).strftime("%Y-%m-%dT20:00:00"))
    night = noon.replace(hour=20)
    cycle_run(now=night, backend=backend)
    cycle_run(now=night + timedelta(seconds=1), backend=backend)
    cycle_run(now=night + timedelta(hours=2), backend=backend)
    job = alice.get(f"/api/v1/jobs/{job_id}/").json()
    assert (job["state"], job["capacity_type"]) == ("Succeeded", "off-peak")
    cost = alice.get(f"/api/v1/jobs/{job_id}/cost/").json()
    [run] = cost["runs"]
    # The seed's A100-80GB on-demand list price is $3.67 per GPU-hour; off-peak is 70 % of it.
    assert Decimal(run["price_per_gpu_hour"]) == Decimal("3.67") * Decimal("0.70")
    assert run["capacity_type"] == "off-peak"
    hours = Decimal(cost["gpu_hours"])
    assert hours == pytest.approx(Decimal(2) * Decimal(str(run["run_s"])) / 3600, abs=Decimal("0.000002"))
    assert Decimal(cost["gpu_usd"]) == pytest.approx(Decimal("2.569") * hours, abs=Decimal("0.000002"))
    # Metering prices the same usage at the same tier: the team's allocation shows it at off-peak.
    assert metering_run() == 1
    allocation = alice.get("/api/v1/cost/allocation?window=7d&aggregate=capacity_type").json()
    assert allocation["totals"]["off-peak"]["gpuCost"] == pytest.approx(float(Decimal("2.569") * hours), abs=1e-5)
