"""POST /api/v1/jobs/check/: the dry run through the API, checked against figures recomputed from the
rules (price × GPU-hours from the price book's rows; never-fits from the nodes' sizes), and against
the next cycle on the same state."""

from __future__ import annotations

from datetime import datetime
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction

import pytest

from billing.models import PriceBookEntry
from billing.services import price_book_seed_defaults
from portal.jobs.models import Job
from portal.jobs.states import JobState
from scheduling.adapters.simulated import SimulatedCluster
from scheduling.dry_run import dry_run_forget
from scheduling.services import cycle_run

pytestmark = pytest.mark.django_db

SPEEDUP = 60.0
BODY = {
    "queue": "default",
    "image": "nvcr.io/nvidia/pytorch:24.08-py3",
    "gpu": 2,
    "cpu_milli": 4000,
    "memory_mib": 16384,
    "runtime_s": 7200,
    "allowed_gpu_models": ["A100-80GB"],
}


@pytest.fixture(autouse=True)
def prices(settings):
    settings.SIM_SPEEDUP = SPEEDUP
    settings.CLUSTER_BACKEND = "simulated"
    price_book_seed_defaults()
    dry_run_forget()
    yield
    dry_run_forget()


def usd_per_hour(resource: str, gpu_model: str = "", capacity_type: str = "on-demand") -> Fraction:
    return Fraction(
        PriceBookEntry.objects.get(resource=resource, gpu_model=gpu_model, capacity_type=capacity_type).usd_per_hour
    )


def six(value: Fraction) -> Decimal:
    return (Decimal(value.numerator) / Decimal(value.denominator)).quantize(Decimal("0.000001"), ROUND_HALF_EVEN)


def test_a_job_that_fits_runs_now_and_costs_its_gpu_hours_at_the_price_books_price(api, world):
    answer = api("alice").post("/api/v1/jobs/check/", BODY, format="json")
    assert answer.status_code == 200, answer.json()
    check = answer.json()
    assert check["verdict"] == "runs_now"
    assert check["gpu_model"] == "A100-80GB"
    assert len(check["placements"]) == 1
    assert check["placements"][0]["node"].startswith("a100-")
    assert len(check["placements"][0]["gpu_indices"]) == 2
    # Recomputed from the rule: the simulated cluster runs 7200 s in 7200 / SPEEDUP s, so
    # 2 GPUs × 120 s = 1/15 GPU-hour; 4 cores and 16 GiB for as long; on-demand prices of the book.
    hours = Fraction(7200) / Fraction(SPEEDUP) / 3600
    cost = check["cost"]
    assert Decimal(cost["gpu_hours"]) == six(2 * hours)
    assert Decimal(cost["gpu_usd"]) == six(2 * hours * usd_per_hour("gpu", "A100-80GB"))
    assert Decimal(cost["cpu_usd"]) == six(4 * hours * usd_per_hour("cpu"))
    assert Decimal(cost["memory_usd"]) == six(16 * hours * usd_per_hour("memory"))
    assert Decimal(cost["total_usd"]) == six(
        hours * (2 * usd_per_hour("gpu", "A100-80GB") + 4 * usd_per_hour("cpu") + 16 * usd_per_hour("memory"))
    )
    assert Fraction(Decimal(cost["price_per_gpu_hour"])) == usd_per_hour("gpu", "A100-80GB")
    assert cost["capacity_type"] == "on-demand"
    assert Job.objects.count() == 0  # a dry run submits nothing


def test_a_t4_job_is_priced_at_the_spot_price_of_the_spot_node_it_would_get(api, world):
    body = {**BODY, "gpu": 1, "allowed_gpu_models": ["T4"]}
    check = api("alice").post("/api/v1/jobs/check/", body, format="json").json()
    assert check["verdict"] == "runs_now"
    assert check["cost"]["capacity_type"] == "spot"  # t4-0 carries the spot label
    hours = Fraction(7200) / Fraction(SPEEDUP) / 3600
    assert Decimal(check["cost"]["gpu_usd"]) == six(hours * usd_per_hour("gpu", "T4", "spot"))


def test_more_gpus_than_any_node_has_never_runs_and_says_so_from_the_nodes_sizes(api, world):
    check = api("alice").post("/api/v1/jobs/check/", {**BODY, "gpu": 9}, format="json")
    # The world's A100 nodes have 8 GPUs each: 9 on one node can never be.
    assert check.status_code == 200
    data = check.json()
    assert data["verdict"] == "never"
    assert data["reason"]["waits"] is False
    assert data["reason"]["details"]["limit"] == "largest_node"
    assert data["reason"]["details"]["largest"] == 8 * 1000
    assert data["cost"] is None
    assert data["estimated_start_p50"] is None


def test_a_bad_body_is_the_submissions_400_naming_the_field(api, world):
    answer = api("alice").post("/api/v1/jobs/check/", {**BODY, "gpu_milli": 250}, format="json")
    assert answer.status_code == 400
    assert "gpu_milli" in answer.json()["errors"]
    unknown = api("alice").post("/api/v1/jobs/check/", {**BODY, "gpus": 2}, format="json")
    assert unknown.status_code == 400
    assert "gpus" in unknown.json()["errors"]


def test_when_the_model_is_full_it_waits_until_the_running_jobs_expected_end_and_the_next_cycle_agrees(api, world):
    # Both A100 nodes taken by two 8-GPU jobs of the same team (nothing to reclaim, nobody to
    # preempt), of 3600 s: 60 s of the simulated cluster's time.
    for _ in range(2):
        world.submit("vision", gpu=8, allowed_gpu_models=(world.models["A100-80GB"],), runtime_s=3600)
    cycle_run(backend=SimulatedCluster(speedup=SPEEDUP))
    running = list(Job.objects.filter(state__in=[JobState.ADMITTED, JobState.RUNNING]))
    assert len(running) == 2
    check = api("alice").post("/api/v1/jobs/check/", BODY, format="json").json()
    assert check["verdict"] == "waits"
    assert check["position"] == 1
    assert check["reason"]["kind"] in ("placement", "quota")
    # Expected end of the first of them: its start (admission: its pods start when the cluster says)
    # plus 3600 / SPEEDUP seconds; the dry run starts the job there.
    first_end = min((j.started_at or j.admitted_at).timestamp() for j in running) + 3600 / SPEEDUP
    start = datetime.fromisoformat(check["estimated_start_p50"].replace("Z", "+00:00")).timestamp()
    assert start == pytest.approx(first_end, abs=1.5)
    assert check["estimated_start_p90"] is not None
    # The same body submitted: the next cycle keeps it pending for the same reason.
    submitted = api("alice").post("/api/v1/jobs/", BODY, format="json")
    assert submitted.status_code == 201
    assert submitted.json()["check"]["verdict"] == "waits"
    cycle_run(backend=SimulatedCluster(speedup=SPEEDUP))
    job = Job.objects.get(pk=submitted.json()["id"])
    assert job.state == JobState.PENDING
    assert job.pending_reason["message"] == check["reason"]["message"]
    assert job.estimated_start is not None
    assert job.estimated_start.timestamp() == pytest.approx(start, abs=1.5)


def test_a_wait_suggests_the_model_that_is_free(api, world):
    for _ in range(2):
        world.submit("vision", gpu=8, allowed_gpu_models=(world.models["A100-80GB"],), runtime_s=3600)
    cycle_run(backend=SimulatedCluster(speedup=SPEEDUP))
    check = api("alice").post("/api/v1/jobs/check/", {**BODY, "gpu": 1}, format="json").json()
    assert check["verdict"] == "waits"
    changes = [s["change"] for s in check["suggestions"]]
    assert {"allowed_gpu_models": ["T4"]} in changes
    t4 = next(s for s in check["suggestions"] if s["change"] == {"allowed_gpu_models": ["T4"]})
    assert t4["verdict"] == "runs_now"


def test_a_ray_jobs_dry_run_places_every_pod_and_costs_the_head_and_all_workers(api, world):
    ray = {
        "mode": "job",
        "entrypoint": "python tune.py",
        "worker_groups": [{"name": "gpu", "replicas": 2, "gpu": 4, "cpu_milli": 8000, "memory_mib": 32768}],
    }
    body = {**BODY, "kind": "ray", "gpu": 0, "cpu_milli": 2000, "memory_mib": 4096, "ray": ray}
    check = api("alice").post("/api/v1/jobs/check/", body, format="json").json()
    assert check["verdict"] == "runs_now", check
    assert [len(p["gpu_indices"]) for p in check["placements"]] == [0, 4, 4]
    # Recomputed from the rule: 8 GPUs, 2 + 16 cores, 4 + 64 GiB for 7200 / SPEEDUP s
    hours = Fraction(7200) / Fraction(SPEEDUP) / 3600
    cost = check["cost"]
    assert Decimal(cost["gpu_hours"]) == six(8 * hours)
    assert Decimal(cost["cpu_usd"]) == six(18 * hours * usd_per_hour("cpu"))
    assert Decimal(cost["memory_usd"]) == six(68 * hours * usd_per_hour("memory"))


def test_an_inference_replica_is_priced_an_hour_at_a_time_not_for_the_longest_runtime_it_may_ask(api, world):
    """An inference replica runs until stopped: its ``runtime_s`` is only the longest a job may ask
    for, so the dry run prices one hour of it (its rate), as the job's page does once it runs."""
    body = {**BODY, "kind": "inference", "gpu": 1, "runtime_s": 90 * 24 * 3600}
    check = api("alice").post("/api/v1/jobs/check/", body, format="json").json()
    assert check["verdict"] == "runs_now"
    cost = check["cost"]
    assert cost["per_hour"] is True
    assert cost["runtime_s"] == 3600
    assert check["runtime_s"] is None
    # One hour of 1 GPU, 4 cores and 16 GiB at the book's on-demand prices.
    rate = usd_per_hour("gpu", "A100-80GB") + 4 * usd_per_hour("cpu") + 16 * usd_per_hour("memory")
    assert Decimal(cost["gpu_hours"]) == 1
    assert Decimal(cost["total_usd"]) == six(rate)
    batch = api("alice").post("/api/v1/jobs/check/", {**BODY, "gpu": 1}, format="json").json()
    assert batch["cost"]["per_hour"] is False
    assert batch["runtime_s"] == 7200 / SPEEDUP
