"""What a user of ``make demo`` reaches, on the demo's own database: SQLite.

The suite runs on PostgreSQL; ``make demo`` runs on SQLite, where SQL written for PostgreSQL (arrays,
casts, its driver's time-zone-aware datetimes read without the ORM's converters) breaks. A token read
that way answered every API request of the demo with a 500. The tests here run on the suite's
database like any other; ``test_this_module_passes_on_sqlite`` runs this same module on SQLite.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection
from django.test import TestCase
from django.utils import timezone

from scheduling.adapters.simulated import SimulatedCluster
from scheduling.services import cycle_run

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parent.parent

JOB = {
    "name": "demo-db",
    "queue": "default",
    "image": "nvcr.io/nvidia/pytorch:24.08-py3",
    "command": ["python", "train.py"],
    "gpu": 1,
    "cpu_milli": 2000,
    "memory_mib": 8192,
    "runtime_s": 3600,
}


def test_the_api_with_a_token(world, api):
    alice = api("alice")
    check = alice.post("/api/v1/jobs/check/", JOB, format="json")
    assert check.status_code == 200, check.content[:500]
    assert check.json()["verdict"] == "runs_now"
    submitted = alice.post("/api/v1/jobs/", JOB, format="json", headers={"Idempotency-Key": "demo-db-1"})
    assert submitted.status_code == 201, submitted.content[:500]
    job_id = submitted.json()["id"]
    again = alice.post("/api/v1/jobs/", JOB, format="json", headers={"Idempotency-Key": "demo-db-1"})
    assert again.json()["id"] == job_id
    with TestCase.captureOnCommitCallbacks(execute=True):
        cycle_run(now=timezone.now(), backend=SimulatedCluster())
    for path in (
        "/api/v1/jobs/",
        f"/api/v1/jobs/{job_id}/",
        f"/api/v1/jobs/{job_id}/cost/",
        "/api/v1/cost/allocation?window=7d&aggregate=namespace",
        "/api/v1/cost/budgets",
        "/api/v1/fairness/",
        "/api/v1/capacity/",
        "/api/v1/cluster/",
    ):
        response = alice.get(path)
        assert response.status_code == 200, (path, response.content[:500])
    assert alice.get(f"/api/v1/jobs/{job_id}/").json()["state"] in ("Admitted", "Running")
    cancelled = alice.post(f"/api/v1/jobs/{job_id}/cancel/")
    assert cancelled.status_code == 200, cancelled.content[:500]
    assert api("bob").get(f"/api/v1/jobs/{job_id}/").status_code == 404


def test_the_pages(world, client):
    world.submit(gpu=1)
    with TestCase.captureOnCommitCallbacks(execute=True):
        cycle_run(now=timezone.now(), backend=SimulatedCluster())
    client.force_login(world.users["alice"])
    job = world.users["alice"].jobs.first()
    for path in ("/jobs/", f"/jobs/{job.pk}/", "/jobs/new/", "/queues/", "/cluster/", "/cost/", "/dashboard/"):
        response = client.get(path)
        assert response.status_code == 200, (path, response.content[:500])


def test_this_module_passes_on_sqlite(tmp_path):
    if connection.vendor == "sqlite":
        pytest.skip("already on SQLite (this is the subprocess)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "REDIS_URL"))}
    env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'demo.sqlite3'}"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q", __file__],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "2 passed, 1 skipped" in run.stdout, run.stdout[-2000:]
