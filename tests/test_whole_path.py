"""The whole path to the bill: API submit → engine → simulated cluster → metering → cost allocation."""

from datetime import timedelta

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
