"""A real Celery worker (with embedded beat) against real Redis and PostgreSQL runs the whole path:
a job submitted through the API goes Pending → Admitted → Running → Succeeded on the simulated
cluster, and its GPU-seconds are metered."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from decimal import Decimal
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection
from rest_framework.test import APIClient

from billing.models import UsageRecord
from portal.celery import app as celery_app
from portal.jobs.models import Job
from portal.tokens.services import api_token_create
from tests.factories import build_world

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_REDIS = "redis://127.0.0.1:6379/0"


def database_url() -> str:
    db = connection.settings_dict
    host = db.get("HOST") or "127.0.0.1"
    port = db.get("PORT") or 5432
    auth = db.get("USER") or "postgres"
    if db.get("PASSWORD"):
        auth += f":{db['PASSWORD']}"
    return f"postgres://{auth}@{host}:{port}/{db['NAME']}"


def wait_for(predicate, *, timeout_s: float, what: str, worker: subprocess.Popen):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if worker.poll() is not None:
            raise AssertionError(f"the worker exited with {worker.returncode} while waiting for {what}")
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_runs_a_submitted_job_to_success_and_meters_it(tmp_path, settings_for_worker):
    if connection.vendor != "postgresql":
        pytest.skip("the worker test needs PostgreSQL (set DATABASE_URL); SQLite cannot be shared safely")
    world = build_world()
    queue, redis_url = settings_for_worker
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "REDIS_URL": redis_url,
        "CELERY_TASK_ALWAYS_EAGER": "0",
        "CELERY_QUEUE": queue,
        "SIM_SPEEDUP": "1800",  # 3600 s of requested runtime take 2 s
        "SCHEDULER_INTERVAL_S": "0.5",
        "METERING_INTERVAL_S": "1",
        "PYTHONUNBUFFERED": "1",
    }
    log = (tmp_path / "worker.log").open("w")
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "portal", "worker", "-B", "-s", str(tmp_path / "beat-schedule"),
         "-Q", queue, "--concurrency", "1", "--loglevel", "INFO", "--without-gossip", "--without-mingle"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        client = APIClient()
        _, key = api_token_create(user=world.users["alice"], name="worker test")
        client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
        response = client.post(
            "/api/v1/jobs/",
            {"queue": "default", "image": "pytorch:2.4", "gpu": 2, "runtime_s": 3600},
            format="json",
        )
        assert response.status_code == 201, response.content
        job_id = response.json()["id"]

        wait_for(
            lambda: Job.objects.filter(pk=job_id, state="Succeeded").exists(),
            timeout_s=90,
            what="the job to succeed",
            worker=worker,
        )
        record = wait_for(
            lambda: UsageRecord.objects.filter(job_id=job_id).first(), timeout_s=30, what="metering", worker=worker
        )
        job = Job.objects.get(pk=job_id)
        history = list(job.transitions.values_list("to_state", "actor"))
        assert history == [
            ("Pending", "alice"),
            ("Admitted", "scheduler"),
            ("Running", "cluster"),
            ("Succeeded", "cluster"),
        ]
        run_s = Decimal(str((job.finished_at - job.started_at).total_seconds()))
        assert run_s == Decimal("2")  # the simulated cluster's own timestamps: 3600 s / 1800
        assert record.gpu_model == "A100-80GB"
        assert record.gpu_seconds == Decimal("2") * run_s  # 2 GPUs
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
        log.close()
        print((tmp_path / "worker.log").read_text()[-3000:])


@pytest.fixture
def settings_for_worker():
    """Publish to the real Redis broker on a queue of this test's own, then restore the eager default."""
    redis_url = settings.REDIS_URL or os.environ.get("REDIS_URL") or DEFAULT_REDIS
    queue = f"portal-test-{uuid.uuid4().hex[:8]}"
    saved = {k: celery_app.conf[k] for k in ("task_always_eager", "broker_url", "task_default_queue")}
    celery_app.conf.update(task_always_eager=False, broker_url=redis_url, task_default_queue=queue)
    yield queue, redis_url
    celery_app.conf.update(saved)
