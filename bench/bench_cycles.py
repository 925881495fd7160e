"""Cycles benchmark: what a stream of submissions costs the Celery worker, and how soon a cycle sees each.

Usage: ``python bench/bench_cycles.py [--rate 8] [--seconds 60] [--history 2000] [--backlog 400]``.

On a stack of its own (PostgreSQL, Redis, one Celery worker and beat, as ``bench/bench_load.py``
starts them: a periodic cycle every 2 s over the same seeded backlog), submissions arrive at a fixed
``--rate`` a second for ``--seconds`` through ``job_submit`` in this process (no web tier, so the
rate does not depend on how fast the API answers on a busy machine). Each asks for a cycle as the
API's do. Printed: the worker's CPU time over the run and per submitted job, the cycles that ran
(count, mean duration), and the time from each submission's commit to the start of the next cycle
(median, 95th percentile, max): how long a job waits for a cycle that can admit it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from bisect import bisect_right
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_load import TEAMS, seed
from bench.stack import Stack, django_against, free_port, group_cpu_s, wait_until


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=8.0, help="submissions a second")
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--history", type=int, default=2000, help="finished jobs per team")
    parser.add_argument("--backlog", type=int, default=400, help="pending jobs per team")
    args = parser.parse_args()
    with Stack("cycles") as stack:
        env = stack.environment(
            DATABASE_URL=stack.start_postgres(free_port()), REDIS_URL=stack.start_redis(free_port()),
            SECRET_KEY="bench-only-secret-key-0123456789abcdefghijklmnopqrstuvwxyz", SECURE_SSL_REDIRECT="0",
            CELERY_QUEUE="cycles", CELERY_TASK_ALWAYS_EAGER="0", SCHEDULER_INTERVAL_S="2", SIM_SPEEDUP="60",
            METERING_INTERVAL_S="30", CLUSTER_SYNC_INTERVAL_S="10", DB_CONN_MAX_AGE="60", LOG_LEVEL="WARNING",
        )  # fmt: skip
        stack.manage("migrate", "--noinput")
        print(f"seeding: {len(TEAMS)} teams, {args.history} finished and {args.backlog} pending jobs each", flush=True)
        with django_against(env):
            from django.contrib.auth import get_user_model
            from django.db import connection
            from django.utils import timezone

            from portal.jobs.models import LocalQueue, PriorityClass
            from portal.jobs.services import JobSpec, job_submit
            from scheduling.models import CycleRun

            seed(args.history, args.backlog)
            worker = stack.worker(0, "cycles")
            stack.beat()
            wait_until(lambda: CycleRun.objects.exists(), timeout_s=120, what="the first cycle")
            queues = {q.team.slug: q for q in LocalQueue.objects.select_related("team")}
            owners = {slug: get_user_model().objects.get(username=f"{slug}-user") for slug in TEAMS}
            priority = PriorityClass.objects.get(name="default")
            print(f"submitting {args.rate:g} jobs a second for {args.seconds} s", flush=True)
            cpu_before, started = group_cpu_s(worker), time.monotonic()
            first = timezone.now()
            submitted_at = []
            count = int(args.rate * args.seconds)
            for n in range(count):
                time.sleep(max(0.0, started + n / args.rate - time.monotonic()))
                team = TEAMS[n % len(TEAMS)]
                spec = JobSpec(
                    team=queues[team].team, local_queue=queues[team], image="nvcr.io/nvidia/pytorch:24.08-py3",
                    priority_class=priority, gpu=1, cpu_milli=2000, memory_mib=8192, runtime_s=600,
                )  # fmt: skip
                job_submit(owner=owners[team], spec=spec)  # commits, then asks for a cycle
                submitted_at.append(timezone.now())
            last = submitted_at[-1]
            # The last submission's cycle: at most one beat interval and a cycle later.
            wait_until(
                lambda: CycleRun.objects.filter(started_at__gt=last).exists(), timeout_s=60, what="a cycle after"
            )
            elapsed = time.monotonic() - started
            worker_cpu_s = group_cpu_s(worker) - cpu_before
            cycles = list(CycleRun.objects.filter(started_at__gt=first).order_by("started_at"))
            connection.close()
    starts = [c.started_at for c in cycles]
    waits = []
    for at in submitted_at:
        index = bisect_right(starts, at)
        waits.append((starts[index] - at).total_seconds())
    waits.sort()
    durations = [c.duration_ms for c in cycles]
    print(f"\n{count} submissions in {elapsed:.0f} s; {len(cycles)} cycles (mean {statistics.mean(durations):.0f} ms)")
    print(
        f"worker CPU {worker_cpu_s:.1f} s: {worker_cpu_s / count * 1000:.1f} ms per submitted job, "
        f"{worker_cpu_s / elapsed * 60:.1f} s a minute"
    )
    print(
        f"submission to the next cycle's start: median {statistics.median(waits):.2f} s, "
        f"P95 {waits[int(len(waits) * 0.95)]:.2f} s, max {waits[-1]:.2f} s"
    )
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
