"""``scheduling.tasks``: beat de-duplication, one more cycle for work that arrived mid-cycle, retries of
Kubernetes API errors, and real Celery workers (with beat) against real Redis and PostgreSQL running a
submitted job Pending → Admitted → Running → Succeeded, metered."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
import uuid
from decimal import Decimal
from pathlib import Path

import pytest
from celery.exceptions import Retry
from django.conf import settings
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from billing.models import UsageRecord
from portal.celery import app as celery_app
from portal.jobs.models import Job
from portal.tokens.services import api_token_create
from scheduling import services
from scheduling.adapters.simulated import SimulatedCluster
from scheduling.models import CycleRun
from scheduling.services import (
    CYCLE_LOCK_KEY,
    cycle_run,
    periodic_claim,
)
from tests.factories import build_world
from tests.scheduling.helpers import ROOT, database_url, other_session

DEFAULT_REDIS = "redis://127.0.0.1:6379/0"


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
        stop_worker(worker, tmp_path / "worker.log")


def stop_worker(worker: subprocess.Popen, log: Path) -> None:
    """Stop a Celery worker started in its own process group (TERM, then KILL after 20 s) and print
    the end of its log, for a failing test's output."""
    os.killpg(worker.pid, signal.SIGTERM)
    try:
        worker.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()
    print(log.read_text()[-3000:])


@pytest.fixture
def settings_for_worker():
    """Publish to the real Redis broker on a queue of this test's own, then restore the eager default."""
    redis_url = settings.REDIS_URL or os.environ.get("REDIS_URL") or DEFAULT_REDIS
    queue = f"portal-test-{uuid.uuid4().hex[:8]}"
    saved = {k: celery_app.conf[k] for k in ("task_always_eager", "broker_url", "task_default_queue")}
    celery_app.conf.update(task_always_eager=False, broker_url=redis_url, task_default_queue=queue)
    yield queue, redis_url
    celery_app.conf.update(saved)


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
    assert redis_db.exists(services.cycle_key(services.CYCLE_AGAIN_KEY))
    cycle_run(now=timezone.now(), backend=SimulatedCluster())  # the holder's cycle starts: request covered
    assert not services.cycle_again_pop()


def test_a_cycle_turned_away_by_a_cluster_sync_runs_when_the_sync_ends(world, redis_db):
    # Beat sends the sync and the cycle every interval, the sync first; a sync that holds the lock
    # turns the cycle away, which asks for one more. The sync's task runs that cycle when it ends:
    # left to beat, the next sync took the lock again before the next cycle, again and again.
    from scheduling.tasks import cluster_sync_task, sweep_task

    job = world.submit("vision", gpu=1)
    with other_session() as other:  # stands for the sync holding the lock
        other.execute("SELECT pg_advisory_lock(%s)", [CYCLE_LOCK_KEY])
        assert cycle_run(now=timezone.now(), backend=SimulatedCluster()) is None  # turned away
        cluster_sync_task.apply()  # a sync that did not get the lock leaves the request alone
        assert redis_db.exists(services.cycle_key(services.CYCLE_AGAIN_KEY))
        other.execute("SELECT pg_advisory_unlock(%s)", [CYCLE_LOCK_KEY])
    cycles = CycleRun.objects.count()
    cluster_sync_task.apply()  # the sync holds the lock, then runs the cycle that was turned away
    assert CycleRun.objects.count() == cycles + 1
    job.refresh_from_db()
    assert job.state != "Pending"
    assert not services.cycle_again_pop()
    cluster_sync_task.apply()  # nothing asked: a sync only
    sweep_task.apply()
    assert CycleRun.objects.count() == cycles + 1


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


INTERVAL_S = 4.0


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_beat_restarts_do_not_run_a_periodic_cycle_twice_in_an_interval(tmp_path):
    if not settings.REDIS_URL or connection.vendor != "postgresql":
        pytest.skip("needs REDIS_URL and PostgreSQL")
    queue = f"test-beat-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "CELERY_QUEUE": queue,
        "CELERY_TASK_ALWAYS_EAGER": "0",
        "CLUSTER_BACKEND": "simulated",
        "SCHEDULER_INTERVAL_S": str(INTERVAL_S),
        # Only the cycle matters here; the other entries fire rarely.
        "METERING_INTERVAL_S": "3600",
        "CLUSTER_SYNC_INTERVAL_S": "3600",
        "SWEEP_INTERVAL_S": "3600",
        "CAPACITY_SNAPSHOT_INTERVAL_S": "3600",
        "BUDGET_CHECK_INTERVAL_S": "3600",
        "PYTHONPATH": str(ROOT),
    }
    from scheduling.services import PERIODIC_KEY, redis_client

    redis_client().delete(PERIODIC_KEY.format(name="scheduling-cycle"))
    celery = [sys.executable, "-m", "celery", "-A", "portal"]
    worker_log = tmp_path / "worker.log"
    with worker_log.open("w") as out:  # the child keeps its own copy of the descriptor
        worker = subprocess.Popen(
            [*celery, "worker", "-Q", queue, "-P", "solo", "-n", f"{queue}@%h", "--without-gossip", "--without-mingle"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )

    def start_beat(name: str, schedule: str) -> tuple[subprocess.Popen, object]:
        log = tmp_path / f"{name}.log"
        with log.open("w") as out:
            process = subprocess.Popen(
                [*celery, "beat", "--schedule", str(tmp_path / schedule), "-l", "INFO"],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        return process, log

    def wait_sent(log) -> None:
        deadline = time.monotonic() + 60
        while "Sending due task scheduling-cycle" not in log.read_text():
            assert time.monotonic() < deadline, "beat sent nothing"
            time.sleep(0.2)

    beats = []
    try:
        # Two beats overlap (a rollout), then one is killed and restarted on its schedule file, which
        # it had not saved since sending: it sends the cycle again at once.
        beats = [start_beat("beat-a", "schedule-a"), start_beat("beat-b", "schedule-b")]
        for _, log in beats:
            wait_sent(log)
        beats[0][0].send_signal(signal.SIGKILL)
        beats[0][0].wait()
        beats.append(start_beat("beat-a-restarted", "schedule-a"))
        time.sleep(INTERVAL_S * 2.5)
    finally:
        for process, _ in beats:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
        time.sleep(1.0)  # the worker drains what was sent
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
        import redis

        redis.Redis.from_url(settings.REDIS_URL).delete(queue)
    beat_logs = [log for _, log in beats]
    sent = sum(log.read_text().count("Sending due task scheduling-cycle") for log in beat_logs)
    runs = sorted(CycleRun.objects.values_list("started_at", flat=True))
    assert sent > len(runs) >= 1, (sent, runs, worker_log.read_text()[-2000:])
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(runs)]
    assert all(gap >= 0.9 * INTERVAL_S - 0.3 for gap in gaps), gaps


class StartHook(SimulatedCluster):
    """A simulated cluster that runs ``hook`` once, when it is asked to start the pods of the first
    admitted job: after the cycle's snapshot and plan, so whatever the hook submits is not in them."""

    def __init__(self, hook) -> None:
        super().__init__()
        self.hook = hook

    def start(self, *, job_id: int) -> None:
        hook, self.hook = self.hook, None
        if hook is not None:
            hook()


@pytest.mark.django_db(transaction=True)
def test_a_burst_of_submissions_gets_one_cycle_and_its_last_write_is_never_stranded(cycle_keys, monkeypatch):
    """No beat here: each requested cycle is run by hand from what the submissions sent. A request is
    dropped only when a cycle that started after it has run to its end; a write made after a cycle's
    snapshot gets a cycle of its own."""
    from portal.jobs.services import job_submit
    from scheduling.tasks import scheduling_cycle_task

    world = build_world()
    sent: list[dict] = []
    monkeypatch.setattr(scheduling_cycle_task, "apply_async", lambda kwargs=None, **options: sent.append(kwargs))
    backend = SimulatedCluster()
    monkeypatch.setattr(services, "cluster_backend", lambda: backend)

    def submit() -> Job:
        return job_submit(owner=world.users["alice"], spec=world.spec(gpu=1))

    def state(job: Job) -> str:
        job.refresh_from_db()
        return "admitted" if job.state in ("Admitted", "Running") else job.state

    def run_sent() -> None:
        assert len(sent) == 1, sent
        scheduling_cycle_task.apply(kwargs=sent.pop())

    burst = [submit() for _ in range(3)]
    assert len(sent) == 1  # one request for the burst
    run_sent()
    assert CycleRun.objects.count() == 1
    assert [state(job) for job in burst] == ["admitted"] * 3

    late = submit()
    assert len(sent) == 1  # the cycle has started: the next write asks for another
    cycle_run(now=timezone.now(), backend=backend)  # beat's cycle comes first and takes it
    assert state(late) == "admitted"
    run_sent()
    assert CycleRun.objects.count() == 2  # the request was dropped: its batch was taken

    after_snapshot: list[Job] = []
    backend = StartHook(lambda: after_snapshot.append(submit()))
    first = submit()
    run_sent()  # admits `first`; starting its pods submits another job, after the snapshot
    assert state(first) == "admitted"
    assert len(after_snapshot) == 1
    assert state(after_snapshot[0]) == "Pending"
    assert CycleRun.objects.count() == 3
    run_sent()  # the cycle that started before that write does not take it
    assert CycleRun.objects.count() == 4
    assert state(after_snapshot[0]) == "admitted"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_admits_the_last_submission_of_a_burst_without_beat(tmp_path, settings_for_worker, settings):
    """A worker and no beat: only the submissions' requests run cycles. They coalesce (fewer cycles
    than submissions), and every job of the burst is admitted, the last one included."""
    if connection.vendor != "postgresql":
        pytest.skip("the worker test needs PostgreSQL (set DATABASE_URL)")
    world = build_world(a100_nodes=4)
    queue, redis_url = settings_for_worker
    settings.CYCLE_BATCH_S = 0.2
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "REDIS_URL": redis_url,
        "CELERY_TASK_ALWAYS_EAGER": "0",
        "CELERY_QUEUE": queue,
        "SIM_SPEEDUP": "1",
        "PYTHONUNBUFFERED": "1",
        # REDIS_URL is already this xdist worker's own database: tests/settings.py must not move the
        # Celery worker to another one (this process publishes the tasks it must take).
        "PYTEST_XDIST_WORKER": "",
    }
    with (tmp_path / "worker.log").open("w") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "portal", "worker", "-Q", queue, "--concurrency", "1",
             "--loglevel", "INFO", "--without-gossip", "--without-mingle"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        # Started first: on a busy machine a worker takes a while to start, and the burst should meet it
        # running (its requests are spaced from its cycles).
        wait_for(
            lambda: " ready." in (tmp_path / "worker.log").read_text(), timeout_s=120, what="the worker", worker=worker
        )
        client = APIClient()
        _, key = api_token_create(user=world.users["alice"], name="burst test")
        client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
        ids = []
        for n in range(20):
            response = client.post(
                "/api/v1/jobs/",
                {"queue": "default", "image": "pytorch:2.4", "gpu": 1, "runtime_s": 3600},
                format="json",
            )
            assert response.status_code == 201, response.content
            ids.append(response.json()["id"])
            time.sleep(0.05 * (n % 3))  # some writes land while a cycle runs
        wait_for(
            lambda: Job.objects.filter(pk__in=ids, state__in=["Admitted", "Running"]).count() == len(ids),
            timeout_s=90,
            what="every job of the burst to be admitted",
            worker=worker,
        )
        assert 1 <= CycleRun.objects.count() < len(ids)
    finally:
        stop_worker(worker, tmp_path / "worker.log")
