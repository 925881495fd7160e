"""Overlapping and restarted Celery beats send the cycle more often than its interval; it runs once per interval."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest
from django.conf import settings
from django.db import connection

from scheduling.models import CycleRun
from tests.control.test_workers import ROOT, database_url

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
    worker = subprocess.Popen(
        [*celery, "worker", "-Q", queue, "-P", "solo", "-n", f"{queue}@%h", "--without-gossip", "--without-mingle"],
        cwd=ROOT,
        env=env,
        stdout=worker_log.open("w"),
        stderr=subprocess.STDOUT,
    )

    def start_beat(name: str, schedule: str) -> tuple[subprocess.Popen, object]:
        log = tmp_path / f"{name}.log"
        process = subprocess.Popen(
            [*celery, "beat", "--schedule", str(tmp_path / schedule), "-l", "INFO"],
            cwd=ROOT,
            env=env,
            stdout=log.open("w"),
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
