"""Four real Celery workers, real Redis and PostgreSQL, 2,000 jobs, one worker SIGKILLed mid-cycle.

Run twice: on the simulated cluster, and on the fake Kubernetes API server (a kubelet thread starts
bound pods and finishes them a second later) with the workers reaching it through a kubeconfig.
Afterwards ``manage.py audit`` is clean, no job is lost or failed, every job's history shows it
pending, running or finished exactly once per attempt, and no pod was ever created twice.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone

from portal.celery import app as celery_app
from portal.jobs.models import FlavorQuota, Job, JobTransition
from portal.jobs.states import JobState
from scheduling.models import CycleRun
from tests.factories import build_world
from tests.scheduling.adapters.factories import bulk_jobs
from tests.scheduling.adapters.fakeapi import FakeKubeApi
from tests.scheduling.helpers import ROOT, database_url

WORKERS = 4
JOBS = 2000
DEADLINE_S = 240  # a hard cap for a loaded machine; unloaded, every job finishes in 1-2 minutes


def cycle_holder() -> int | None:
    """The OS pid of the worker process holding the cycle lock (it names itself in pg_stat_activity)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted AND a.datname = current_database() "
            "AND a.application_name LIKE 'gpu-portal cycle pid=%%'"
        )
        row = cursor.fetchone()
    return int(row[0].rsplit("=", 1)[1]) if row else None


def parent_of(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


@pytest.fixture(params=["simulated", "kubernetes"])
def cluster(request, tmp_path):
    """Environment for the workers and a per-second hook (the kubelet) for the chosen backend."""
    if request.param == "simulated":
        yield {"env": {"CLUSTER_BACKEND": "simulated", "SIM_SPEEDUP": "60"}, "tick": lambda: None, "kube": None}
        return
    kube = FakeKubeApi().start()
    for i in range(16):
        kube.add_node(f"a100-{i}", gpus=8, cpu="96", memory="1Ti", labels={"topology.kubernetes.io/rack": f"r{i % 4}"})
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(kube.kubeconfig())
    env = {"CLUSTER_BACKEND": "kubernetes", "KUBECONFIG": str(kubeconfig), "K8S_WATCH_TIMEOUT_S": "20"}
    yield {"env": env, "tick": lambda: kube.kubelet_tick(runtime_s=1.0), "kube": kube}
    kube.stop()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.filterwarnings("ignore::celery.exceptions.AlwaysEagerIgnored")  # send_task always sends
def test_four_workers_lose_nothing_when_one_is_killed_mid_cycle(tmp_path, cluster):
    if not settings.REDIS_URL or connection.vendor != "postgresql":
        pytest.skip("needs REDIS_URL and PostgreSQL")
    simulated = cluster["kube"] is None
    world = build_world(a100_nodes=16 if simulated else 0, t4_nodes=0)
    FlavorQuota.objects.filter(gpu_model__name="A100-80GB").update(nominal_gpus=64)
    bulk_jobs(world, JOBS // 2, team="vision", owner="alice", gpu=1, runtime_s=60)
    bulk_jobs(world, JOBS // 2 - 100, team="nlp", owner="bob", gpu=1, runtime_s=120)
    bulk_jobs(world, 100, team="nlp", owner="bob", gpu=4, runtime_s=60)
    queue = f"test-workers-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "CELERY_QUEUE": queue,
        "CELERY_TASK_ALWAYS_EAGER": "0",
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "PYTHONPATH": str(ROOT),
        **cluster["env"],
    }
    logs = [tmp_path / f"worker{i}.log" for i in range(WORKERS)]
    command = [sys.executable, "-m", "celery", "-A", "portal", "worker", "-Q", queue, "-c", "1", "-P", "prefork"]
    command += ["--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "INFO"]
    workers = []
    for i, log in enumerate(logs):
        with log.open("w") as out:  # the child keeps its own copy of the descriptor
            workers.append(
                subprocess.Popen(
                    [*command, "-n", f"w{i}-{queue}@%h"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
                )
            )
    stop = threading.Event()

    def beat() -> None:
        """Sends the periodic tasks the way beat would, only faster; runs the kubelet."""
        tick = 0
        while not stop.is_set():
            celery_app.send_task("scheduling.tasks.scheduling_cycle", queue=queue)
            if tick % 4 == 0:
                celery_app.send_task("scheduling.tasks.cluster_sync", queue=queue)
            if tick % 10 == 0:
                celery_app.send_task("scheduling.tasks.sweep", queue=queue)
            cluster["tick"]()
            tick += 1
            stop.wait(0.5)

    killed: dict[str, object] = {}
    started = time.monotonic()
    try:
        deadline = time.monotonic() + 120
        while not all("ready" in log.read_text() for log in logs):
            assert time.monotonic() < deadline, "workers did not start"
            assert all(w.poll() is None for w in workers), "a worker exited at start"
            time.sleep(0.5)
        sender = threading.Thread(target=beat, daemon=True)
        sender.start()
        worker_pids = {w.pid for w in workers}
        # After two cycles, kill whichever worker process is half a second into a cycle (a cycle with
        # ~2,000 pending jobs takes seconds, so this lands in the engine or in the plan's transaction).
        while CycleRun.objects.count() < 2:
            assert time.monotonic() - started < DEADLINE_S, "no cycles ran"
            time.sleep(0.2)
        while "pid" not in killed:
            assert time.monotonic() - started < DEADLINE_S, "no cycle to interrupt"
            holder = cycle_holder()
            if holder is None or parent_of(holder) not in worker_pids:
                time.sleep(0.05)
                continue
            time.sleep(0.5)
            if cycle_holder() == holder:
                os.kill(holder, signal.SIGKILL)
                killed.update(
                    pid=holder,
                    at=timezone.now(),
                    cycles=CycleRun.objects.count(),
                    succeeded=Job.objects.filter(state=JobState.SUCCEEDED).count(),
                )
        # The loop goes on: the dead session's lock is gone, the redelivered or next cycle converges.
        while time.monotonic() - started < DEADLINE_S:
            if not Job.objects.exclude(state=JobState.SUCCEEDED).exists():
                break
            time.sleep(1.0)
        if not simulated:
            # Let a last cycle converge: finished pods stay, nothing else may be left running.
            time.sleep(3.0)
    finally:
        stop.set()
        time.sleep(0.6)
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            try:
                worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
        import redis

        redis.Redis.from_url(settings.REDIS_URL).delete(queue)
    elapsed = time.monotonic() - started
    tails = "\n".join(log.read_text()[-1500:] for log in logs)
    assert killed, "no worker was killed"
    assert any("signal 9" in log.read_text() for log in logs), "no worker saw its child die by SIGKILL\n" + tails
    cycles_after = CycleRun.objects.filter(started_at__gte=killed["at"]).count()
    assert cycles_after >= 2, "cycles stopped after the kill\n" + tails

    states = Counter(Job.objects.values_list("state", flat=True))
    assert sum(states.values()) == JOBS
    assert set(states) <= {JobState.PENDING, JobState.ADMITTED, JobState.RUNNING, JobState.SUCCEEDED}, states
    finished = Counter(JobTransition.objects.filter(to_state=JobState.SUCCEEDED).values_list("job_id", flat=True))
    assert max(finished.values(), default=0) <= 1
    assert states[JobState.SUCCEEDED] > killed["succeeded"], ("no progress after the kill", states, elapsed)
    kube = cluster["kube"]
    if kube is not None:
        created = Counter(kube.created_pods)
        assert max(created.values()) == 1, "a pod was created twice"
        attempts = dict(Job.objects.values_list("id", "attempt"))
        for name in created:
            job_id = int(name.split("/job-")[1].split("-")[0])
            assert job_id in attempts, f"{name} belongs to no job"

    audit = subprocess.run(
        [sys.executable, "manage.py", "audit"],
        cwd=ROOT,
        env={k: v for k, v in env.items() if k != "CELERY_QUEUE"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert "audit: clean" in audit.stdout
    print(
        f"\n[{env['CLUSTER_BACKEND']}] {JOBS} jobs, {WORKERS} workers: {dict(states)} in {elapsed:.0f} s; "
        f"killed pid {killed['pid']} after {killed['cycles']} cycles, {cycles_after} cycles after; "
        f"{CycleRun.objects.count()} cycles in all"
        + (f"; {len(kube.created_pods)} pods created" if kube is not None else "")
    )
