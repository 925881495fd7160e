"""Ray jobs end to end on the simulated cluster: submit a head and worker groups, get clear 400s for bad
specs, admit them as one gang, run to Succeeded, and bill every pod's GPUs, CPU and memory."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.models import PriceBookEntry, UsageRecord
from billing.services import metering_run, price_book_seed_defaults
from portal.jobs.models import FlavorQuota, Job, JobTransition
from scheduling.adapters.simulated import SimulatedCluster
from scheduling.services import cycle_run

pytestmark = pytest.mark.django_db

HEAD = {"queue": "default", "image": "rayproject/ray:2.34.0", "kind": "ray", "gpu": 0, "cpu_milli": 2000}
GROUPS = [
    {"name": "big", "replicas": 2, "gpu": 4, "cpu_milli": 8000, "memory_mib": 65536},
    {"name": "small", "replicas": 1, "gpu": 2, "cpu_milli": 4000, "memory_mib": 16384},
]
RAY = {"mode": "job", "entrypoint": "python train.py", "worker_groups": GROUPS}


def submit(client, **fields):
    return client.post("/api/v1/jobs/", {**HEAD, "ray": RAY, **fields}, format="json")


def test_a_ray_job_is_submitted_and_read_back_with_its_head_and_worker_groups(api, world):
    response = submit(api("alice"))
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["kind"] == "ray"
    assert body["replicas"] == 1  # the head
    assert body["ray"] == RAY
    job = Job.objects.get(pk=body["id"])
    assert job.resources_display() == (
        "head (no GPU, 2 CPU, 4096 MiB) + 2 × (4 GPU, 8 CPU, 65536 MiB) big + 1 × (2 GPU, 4 CPU, 16384 MiB) small"
    )


def test_a_ray_cluster_needs_no_entrypoint(api, world):
    response = submit(api("alice"), ray={"mode": "cluster", "worker_groups": GROUPS[:1]})
    assert response.status_code == 201, response.json()


def groups(**changes):
    return {**RAY, "worker_groups": [{**GROUPS[0], **changes}]}


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"ray": {}}, "ray.entrypoint", "a RayJob needs the command it runs"),
        ({"ray": {"entrypoint": "python x.py"}}, "ray.worker_groups", "a list of 1 to 8 worker groups"),
        ({"ray": "yes"}, "ray", "Expected a dictionary"),
        ({"ray": {**RAY, "mode": "serve"}}, "ray.mode", "is not job (a RayJob) or cluster"),
        ({"ray": {**RAY, "entrypoint": ""}}, "ray.entrypoint", "a RayJob needs the command it runs"),
        ({"ray": {**RAY, "mode": "cluster"}}, "ray.entrypoint", "a RayCluster runs no entrypoint"),
        ({"ray": {**RAY, "workers": 3}}, "ray.workers", "unknown field"),
        ({"ray": groups(gpu=65)}, "ray.worker_groups.0.gpu", "0 to 64"),
        ({"ray": groups(replicas=0)}, "ray.worker_groups.0.replicas", "1 to"),
        (
            {"ray": groups(replicas="2")},
            "ray.worker_groups.0.replicas",
            "integer",
        ),
        (
            {"ray": {**RAY, "worker_groups": [GROUPS[0], {**GROUPS[1], "name": "big"}]}},
            "ray.worker_groups.1.name",
            "two",
        ),
        ({"ray": groups(name="Head!")}, "ray.worker_groups.0.name", "[a-z0-9-]"),
        ({"ray": groups(tpu=1)}, "ray.worker_groups.0.tpu", "unknown field"),
        (
            {"ray": {**RAY, "worker_groups": [{**GROUPS[0], "replicas": 1000}, {**GROUPS[1], "replicas": 100}]}},
            "ray.worker_groups",
            "at most 1024 pods in all, head included (got 1101)",
        ),
        ({"replicas": 3}, "replicas", "its head: leave replicas at 1"),
        ({"min_available": 1}, "min_available", "starts whole"),
        ({"gpu_milli": 500}, "gpu_milli", "whole GPUs"),
        ({"kind": "batch", "gpu": 1}, "ray", "only a Ray job (kind ray) takes ray"),
        # a worker of 16 GPUs fits no 8-GPU node: the engine's own never-fits test, on the group's field
        ({"ray": groups(gpu=16)}, "ray.worker_groups.0.gpu", "pod set big"),
    ],
)
def test_a_bad_ray_spec_gets_a_400_naming_the_field_and_writes_nothing(api, world, fields, field, message):
    response = submit(api("alice"), **fields)
    assert response.status_code == 400, response.content
    errors = response.json()["errors"]
    assert field in errors, errors
    assert message in str(errors[field]), errors
    assert Job.objects.count() == 0
    assert JobTransition.objects.count() == 0


def price(resource, model=""):
    return PriceBookEntry.objects.get(resource=resource, gpu_model=model, capacity_type="on-demand").usd_per_hour


def test_a_ray_job_runs_whole_on_the_simulated_cluster_and_bills_every_pod(api, world):
    price_book_seed_defaults()
    alice = api("alice")
    # 10 worker GPUs: more than one 8-GPU node, within the team's 8 nominal + borrowed quota
    job_id = submit(alice, runtime_s=7200).json()["id"]
    backend = SimulatedCluster(speedup=1)
    start = (timezone.now() - timedelta(hours=3)).replace(microsecond=0)
    cycle_run(now=start, backend=backend)
    job = alice.get(f"/api/v1/jobs/{job_id}/").json()
    assert job["state"] in ("Admitted", "Running"), job["pending_reason"]
    # head first, then the groups' workers in order
    assert [len(p["gpu_indices"]) for p in job["placements"]] == [0, 4, 4, 2]
    assert [p["cpu_milli"] for p in job["placements"]] == [2000, 8000, 8000, 4000]
    cycle_run(now=start + timedelta(seconds=1), backend=backend)
    cycle_run(now=start + timedelta(hours=2, seconds=1), backend=backend)
    job = alice.get(f"/api/v1/jobs/{job_id}/").json()
    assert job["state"] == "Succeeded"

    metering_run()
    job = alice.get(f"/api/v1/jobs/{job_id}/").json()
    hours = Decimal(2)  # runtime_s at speedup 1
    gpus, cores, gib = 4 + 4 + 2, Decimal(2 + 8 + 8 + 4), Decimal(4096 + 65536 * 2 + 16384) / 1024
    assert Decimal(job["gpu_hours"]) == gpus * hours
    expected = gpus * hours * price("gpu", "A100-80GB") + cores * hours * price("cpu") + gib * hours * price("memory")
    assert Decimal(job["cost_usd"]) == expected.quantize(Decimal(job["cost_usd"]))
    # the usage records (invoices, team rollups) bill the same pods
    records = UsageRecord.objects.filter(job_id=job_id)
    assert sum(r.gpu_seconds for r in records) == gpus * 7200
    assert sum(r.cpu_core_seconds for r in records) == cores * 7200
    assert sum(r.memory_gib_seconds for r in records) == gib * 7200


def test_nothing_of_a_ray_job_starts_until_every_worker_group_fits(api, world):
    FlavorQuota.objects.update(nominal_gpus=32)  # room in quota: only the nodes decide here
    alice = api("alice")
    blocker = alice.post("/api/v1/jobs/", {"queue": "default", "image": "pytorch:2.4", "gpu": 5}, format="json")
    cycle_run(now=timezone.now(), backend=SimulatedCluster())
    assert alice.get(f"/api/v1/jobs/{blocker.json()['id']}/").json()["state"] == "Admitted"
    # 3 + 8 GPUs free: the head and "big" (2 x 4) would fit, "small" (1 x 4) then would not
    groups = [GROUPS[0], {**GROUPS[1], "gpu": 4}]
    job_id = submit(alice, ray={**RAY, "worker_groups": groups}).json()["id"]
    cycle_run(now=timezone.now(), backend=SimulatedCluster())
    job = alice.get(f"/api/v1/jobs/{job_id}/").json()
    assert job["state"] == "Pending"
    assert job["placements"] == []
    assert job["pending_reason"]["kind"] == "gang"
    assert "pod set small" in job["pending_reason"]["message"]


def test_a_ray_spec_broken_behind_the_apis_back_runs_nowhere_and_the_cycle_goes_on(api, world):
    alice = api("alice")
    job_id = submit(alice).json()["id"]
    Job.objects.filter(pk=job_id).update(ray={"worker_groups": [{"name": "gpu", "replicas": "many"}]})  # the admin
    other = alice.post("/api/v1/jobs/", {"queue": "default", "image": "pytorch:2.4", "gpu": 1}, format="json")
    cycle_run(now=timezone.now(), backend=SimulatedCluster())
    assert alice.get(f"/api/v1/jobs/{job_id}/").json()["state"] == "Pending"
    assert alice.get(f"/api/v1/jobs/{other.json()['id']}/").json()["state"] == "Admitted"
