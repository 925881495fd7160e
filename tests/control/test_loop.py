"""The control loop's coordination: one cycle at a time, the fence, beat dedup, and /metrics."""

from __future__ import annotations

import uuid
from decimal import Decimal

import psycopg
import pytest
from celery.exceptions import Retry
from django.db import connection
from django.test import TestCase
from django.utils import timezone

from portal.jobs.models import Job
from portal.jobs.states import JobState
from scheduling import services
from scheduling.adapters import orm
from scheduling.adapters.orm import LostCycleLock
from scheduling.adapters.simulated import SimulatedCluster
from scheduling.engine.cycle import run_cycle
from scheduling.engine.mig import mig_geometry
from scheduling.metrics import _share
from scheduling.services import (
    CYCLE_LOCK_KEY,
    cycle_lock,
    cycle_lock_held,
    cycle_run,
    periodic_claim,
    policy_from_settings,
)


def other_session():
    """A second PostgreSQL session, as another worker would have."""
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    return psycopg.connect(**{k: v for k, v in params.items() if k in {"dbname", "user", "host", "port", "password"}})


def test_a_cycle_is_skipped_while_another_worker_holds_the_lock(world):
    job = world.submit(gpu=1)
    with other_session() as other:
        other.execute("SELECT pg_advisory_lock(%s)", [CYCLE_LOCK_KEY])
        assert cycle_run(now=timezone.now(), backend=SimulatedCluster()) is None
        other.execute("SELECT pg_advisory_unlock(%s)", [CYCLE_LOCK_KEY])
    assert Job.objects.get(pk=job.pk).state == JobState.PENDING
    assert cycle_run(now=timezone.now(), backend=SimulatedCluster()) is not None
    assert Job.objects.get(pk=job.pk).state == JobState.ADMITTED


def test_the_lock_holder_is_named_in_pg_stat_activity(world):
    with cycle_lock() as acquired, other_session() as other:
        assert acquired
        holder = other.execute(
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted AND a.datname = current_database()"
        ).fetchone()
        assert holder[0].startswith("gpu-portal cycle pid=")
        assert cycle_lock_held()
    assert not cycle_lock_held()


def test_a_plan_is_not_written_once_the_lock_is_lost(world):
    job = world.submit(gpu=1)
    backend = SimulatedCluster()
    snapshot = orm.snapshot_load(backend=backend)
    plan = run_cycle(snapshot, policy_from_settings(), timezone.now().timestamp())
    assert plan.admissions
    with pytest.raises(LostCycleLock):
        orm.plan_apply(plan=plan, snapshot=snapshot, now=timezone.now(), backend=backend, fence=lambda: False)
    assert Job.objects.get(pk=job.pk).state == JobState.PENDING


@pytest.fixture
def redis_db(settings):
    if not settings.REDIS_URL:
        pytest.skip("needs REDIS_URL")
    client = services.redis_client()
    yield client
    client.delete(services.CYCLE_AGAIN_KEY)


def test_a_periodic_task_runs_once_per_interval_even_if_beat_sends_it_twice(redis_db):
    name = f"test-{uuid.uuid4().hex}"
    try:
        assert periodic_claim(name, 30)
        assert not periodic_claim(name, 30)  # a restarted or second beat's copy in the same interval
    finally:
        redis_db.delete(services.PERIODIC_KEY.format(name=name))
    short = f"test-{uuid.uuid4().hex}"
    assert periodic_claim(short, 0.05)
    import time

    time.sleep(0.1)
    assert periodic_claim(short, 0.05)  # the next interval runs


def test_work_that_arrives_during_a_cycle_gets_one_more_cycle(world, redis_db):
    with other_session() as other:
        other.execute("SELECT pg_advisory_lock(%s)", [CYCLE_LOCK_KEY])
        assert cycle_run(now=timezone.now(), backend=SimulatedCluster()) is None
        other.execute("SELECT pg_advisory_unlock(%s)", [CYCLE_LOCK_KEY])
    assert redis_db.exists(services.CYCLE_AGAIN_KEY)
    cycle_run(now=timezone.now(), backend=SimulatedCluster())  # the holder's cycle starts: request covered
    assert not services.cycle_again_pop()


def test_metrics_are_exposed_in_kueue_style(world, client, settings):
    for _ in range(3):
        world.submit(gpu=8)
    world.submit(gpu=0, gpu_milli=500)
    with TestCase.captureOnCommitCallbacks(execute=True):
        cycle_run(now=timezone.now(), backend=SimulatedCluster())
    body = client.get("/metrics").content.decode()
    assert 'portal_pending_workloads{cluster_queue="cq-vision",local_queue="vision/default",reason=' in body
    assert 'portal_admitted_gpus{cluster_queue="cq-vision",gpu_model="A100-80GB",local_queue="vision/default"}' in body
    assert "portal_admission_wait_time_seconds_bucket" in body
    assert "portal_scheduling_cycle_duration_seconds_count 1.0" in body
    assert "portal_admitted_active_workloads" in body
    assert 'portal_admitted_workloads_total{cluster_queue="cq-vision"} 3.0' in body
    settings.METRICS_TOKEN = "s3cret"
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer s3cret"}).status_code == 200


def test_a_task_retries_kubernetes_api_errors_then_gives_up(db, kube, settings, tmp_path):
    from scheduling.adapters.kubernetes import KubernetesBackend
    from scheduling.adapters.kubernetes_api import ClusterApiError
    from scheduling.tasks import cluster_sync_task

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(kube.kubeconfig())
    settings.CLUSTER_BACKEND = "kubernetes"
    settings.KUBECONFIG = str(kubeconfig)
    settings.K8S_API_RETRIES = 2
    settings.K8S_API_BACKOFF_S = 0.01
    KubernetesBackend._instances = {}
    kube.fail("GET", r"^/api/v1/nodes$", status=503, times=1000)
    try:
        with pytest.raises(Retry) as retry:
            cluster_sync_task.apply()
        assert isinstance(retry.value.exc, ClusterApiError)
        assert retry.value.when == 2  # backoff: 2, 4, 8, ... s
        with pytest.raises(Retry) as retry:
            cluster_sync_task.apply(retries=3)
        assert retry.value.when == 16
        with pytest.raises(ClusterApiError):
            cluster_sync_task.apply(retries=cluster_sync_task.max_retries + 1)  # gives up
    finally:
        for backend in KubernetesBackend._instances.values():
            backend.close()
        KubernetesBackend._instances = {}
    lists = [p for m, p in kube.requests if m == "GET" and p.startswith("/api/v1/nodes")]
    assert len(lists) == 3 * 2  # each run made K8S_API_RETRIES attempts


@pytest.mark.parametrize(
    ("profile", "share"),
    [("1g.10gb", "0.125"), ("2g.20gb", "0.25"), ("3g.40gb", "0.5"), ("4g.40gb", "0.5"), ("7g.80gb", "1")],
)
def test_admitted_gpus_counts_a_mig_slice_as_the_quota_the_engine_charges_for_it(profile, share):
    assert _share([0], 0, profile, 80) == Decimal(share) == Decimal(mig_geometry(profile, 80).gpu_milli) / 1000
