"""Chaos run: the full stack under faults, then every job, quota and GPU-second accounted for.

Usage: ``make chaos`` (or ``python bench/chaos.py [--jobs 2000] [--deadline 300]``). Needs PostgreSQL's
server binaries and redis-server (apt-packages.txt); it starts its OWN PostgreSQL and Redis on free
ports in a temporary directory and stops them at the end. Exit status 0 when every check passes.

Steps:
1. Start PostgreSQL and Redis of our own, migrate, seed two teams (cluster queues in one cohort,
   vision with a borrowing limit), 16 simulated 8-GPU nodes and ``--jobs`` minus 100 pending jobs.
2. Start 4 Celery workers (one process each), Celery beat (1 s cycles) and gunicorn.
3. Faults, in order, while the jobs run:
   a. kill -9 of the worker process holding the cycle lock, half a second into a cycle (less when
      cycles end sooner);
   b. a Redis restart, with 50 jobs submitted through the API while Redis is down (each sent twice
      with the same Idempotency-Key: a client retrying);
   c. a PostgreSQL restart, with API requests while it is down (each must be a 503 JSON with
      Retry-After), then 50 more submissions.
4. Wait (bounded by ``--deadline``) until every job succeeded, meter, then check:
   - every job accounted once: as many jobs as submitted (retries created none), each succeeded
     exactly once, each history legal (``manage.py audit``'s invariants, on the final state);
   - quota never exceeded at any moment: the whole transition history replayed in time order,
     GPUs held per cluster queue within nominal + borrowing limit, the cohort within its nominal
     total, the cluster within its GPUs;
   - metered GPU-seconds per job equal a recomputation from the Running → Succeeded timestamps.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import urllib.error
import urllib.request
from collections import Counter, defaultdict
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.stack import Stack, django_against, free_port, wait_until

WORKERS = 4
API_JOBS = 100
NODES, GPUS_PER_NODE = 16, 8
NOMINAL = {"vision": 48, "nlp": 48}
BORROWING = {"vision": 16, "nlp": None}
QUEUE = "chaos"


def http(method: str, url: str, token: str, body: dict | None = None, headers: dict | None = None):
    request = urllib.request.Request(
        url,
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Token {token}", "Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


class Report:
    def __init__(self) -> None:
        self.failures: list[str] = []

    def check(self, ok: bool, what: str, detail: str = "") -> None:
        print(f"  [{'ok' if ok else 'FAIL'}] {what}" + (f": {detail}" if detail else ""), flush=True)
        if not ok:
            self.failures.append(what)


def cycle_holder() -> int | None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted AND a.application_name LIKE 'gpu-portal cycle pid=%%'"
        )
        row = cursor.fetchone()
    return int(row[0].rsplit("=", 1)[1]) if row else None


def kill_cycle_holder(report: Report, worker_pids: set[int]) -> None:
    from django.db import connection

    def parent_of(pid: int) -> int | None:
        try:
            return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return None

    # Half a second into a cycle; a cycle that ended before that halves the wait for the next one
    # (down to 20 ms), so short cycles on a fast machine are still caught mid-way.
    deadline, into = time.monotonic() + 60, 0.5
    while time.monotonic() < deadline:
        holder = cycle_holder()
        if holder is not None and parent_of(holder) in worker_pids:
            time.sleep(into)
            if cycle_holder() == holder:
                os.kill(holder, signal.SIGKILL)
                report.check(
                    True, "kill -9 of the worker process holding the cycle lock", f"pid {holder}, {into:.2f} s in"
                )
                connection.close()
                return
            into = max(0.02, into / 2)
        time.sleep(0.01)
    report.check(False, "kill -9 of the worker process holding the cycle lock", "no cycle caught in 60 s")


def submit_batch(base: str, token: str, count: int, tag: str) -> tuple[list[int], list[int]]:
    """Submit ``count`` jobs, each twice with one Idempotency-Key; returns (statuses, job ids)."""
    statuses, ids = [], []
    for i in range(count):
        body = {"queue": "default", "image": "pytorch:2.4", "gpu": 1, "runtime_s": 60, "name": f"{tag}-{i}"}
        key = {"Idempotency-Key": f"{tag}-{i}"}
        first = http("POST", f"{base}/api/v1/jobs/", token, body, key)
        again = http("POST", f"{base}/api/v1/jobs/", token, body, key)
        statuses += [first[0], again[0]]
        if first[0] == 201:
            ids.append(json.loads(first[2])["id"])
        if again[0] == 201 and first[0] == 201 and json.loads(again[2])["id"] != ids[-1]:
            ids.append(json.loads(again[2])["id"])  # a duplicate: counted, and the check fails
    return statuses, ids


def quota_replay(report: Report) -> None:
    """Replay every transition in time order; GPUs held never exceed any quota at any moment."""
    from portal.jobs.models import FlavorQuota, Job, JobTransition
    from portal.jobs.states import ACTIVE_STATES

    cq_of = dict(Job.objects.values_list("id", "local_queue__cluster_queue__name"))
    limits = {
        f.cluster_queue.name: (f.nominal_gpus, f.borrowing_limit)
        for f in FlavorQuota.objects.select_related("cluster_queue")
    }
    cohort_nominal = sum(nominal for nominal, _ in limits.values())
    events: list[tuple[datetime, int, int, int, Decimal]] = []
    for job_id, source, target, at, detail, pk in JobTransition.objects.values_list(
        "job_id", "from_state", "to_state", "at", "detail", "id"
    ):
        if target == "Admitted":
            events.append((at, 1, pk, job_id, Decimal(detail.get("gpus") or "0")))
        elif source in ACTIVE_STATES and target not in ACTIVE_STATES:
            events.append((at, 0, pk, job_id, Decimal(0)))  # releases before admissions at the same instant
    held: dict[int, Decimal] = {}
    per_cq: dict[str, Decimal] = defaultdict(Decimal)
    worst: dict[str, Decimal] = defaultdict(Decimal)
    breaches = []
    for at, kind, _, job_id, gpus in sorted(events):
        cq = cq_of[job_id]
        if kind == 1:
            held[job_id] = gpus
            per_cq[cq] += gpus
        elif job_id in held:
            per_cq[cq] -= held.pop(job_id)
        for name, used in per_cq.items():
            if used > worst[name]:
                worst[name] = used
            nominal, borrowing = limits[name]
            if borrowing is not None and used > nominal + borrowing:
                breaches.append(f"{at:%H:%M:%S.%f} {name} held {used} > {nominal} + {borrowing}")
        total = sum(per_cq.values(), Decimal(0))
        if total > worst["cohort"]:
            worst["cohort"] = total
        if total > cohort_nominal or total > NODES * GPUS_PER_NODE:
            breaches.append(f"{at:%H:%M:%S.%f} the cohort held {total} > {cohort_nominal}")
    peaks = ", ".join(f"{name} peak {value}" for name, value in sorted(worst.items()))
    report.check(
        not breaches,
        f"quota never exceeded over {len(events)} admissions and releases",
        breaches[0] if breaches else peaks,
    )


def metering_check(report: Report) -> None:
    """Metered GPU-seconds per job equal Running → end timestamps × GPUs, recomputed from history."""
    from django.db.models import Sum

    from billing.models import UsageRecord
    from portal.jobs.models import JobTransition

    expected: dict[int, Decimal] = defaultdict(Decimal)
    open_runs: dict[int, tuple] = {}
    for job_id, source, target, at, detail in JobTransition.objects.order_by("job_id", "at", "id").values_list(
        "job_id", "from_state", "to_state", "at", "detail"
    ):
        if source == "Running" and job_id in open_runs:
            start, gpus = open_runs.pop(job_id)
            expected[job_id] += gpus * Decimal((at - start) // timedelta(microseconds=1)) / Decimal(10**6)
        if target == "Running":
            open_runs[job_id] = (at, Decimal((detail or {}).get("gpus") or "0"))
    metered = dict(UsageRecord.objects.values("job_id").annotate(s=Sum("gpu_seconds")).values_list("job_id", "s"))
    wrong = [
        f"job {job_id}: metered {metered.get(job_id)} vs {value}"
        for job_id, value in expected.items()
        if abs((metered.get(job_id) or Decimal(0)) - value) > Decimal("0.00001")
    ]
    extra = sorted(set(metered) - set(expected))
    total = sum(expected.values())
    report.check(
        not wrong and not extra,
        f"metered GPU-seconds equal a recomputation from transitions ({len(expected)} jobs, {total:.1f} GPU-s)",
        ([*wrong, f"metered without a run: {extra[:5]}"])[0] if wrong or extra else "",
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--deadline", type=float, default=300.0, help="seconds for all jobs to finish")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs)")
    args = parser.parse_args()
    report = Report()
    started = time.monotonic()
    with Stack("chaos", keep=args.keep) as stack:
        print(f"chaos: {args.jobs} jobs, {WORKERS} workers, own PostgreSQL and Redis in {stack.tmp}", flush=True)
        database_url = stack.start_postgres(free_port())
        redis_url = stack.start_redis(free_port())
        env = stack.environment(
            DATABASE_URL=database_url, REDIS_URL=redis_url, CELERY_QUEUE=QUEUE, CELERY_TASK_ALWAYS_EAGER="0",
            SECRET_KEY="chaos-only-secret-key-0123456789abcdefghijklmnopqrstuvwxyz", SECURE_SSL_REDIRECT="0",
            CLUSTER_BACKEND="simulated", SIM_SPEEDUP="60", SCHEDULER_INTERVAL_S="1", CLUSTER_SYNC_INTERVAL_S="2",
            SWEEP_INTERVAL_S="10", METERING_INTERVAL_S="5", CAPACITY_SNAPSHOT_INTERVAL_S="30",
            BUDGET_CHECK_INTERVAL_S="60", CELERY_VISIBILITY_TIMEOUT_S="20", API_THROTTLE_ENABLED="0",
            DB_CONN_MAX_AGE="0", LOG_LEVEL="INFO",
        )  # fmt: skip
        stack.manage("migrate", "--noinput")
        with django_against(env):
            from django.db import connection

            from bench.world import jobs_bulk, world_build
            from portal.jobs.models import Job, JobTransition
            from scheduling.models import CycleRun

            world = world_build(
                nodes=NODES, gpus_per_node=GPUS_PER_NODE, nominal_gpus=NOMINAL, borrowing_limit=BORROWING
            )
            bulk = args.jobs - API_JOBS
            jobs_bulk(world, "vision", bulk // 2, runtime_s=60)
            jobs_bulk(world, "nlp", bulk // 2 - 100, runtime_s=120)
            jobs_bulk(world, "nlp", 100, gpu=4, runtime_s=60)
            connection.close()
            workers = [stack.worker(i, QUEUE) for i in range(WORKERS)]
            stack.beat()
            base = stack.web(free_port(), workers=2)
            wait_until(lambda: CycleRun.objects.count() >= 2, timeout_s=90, what="the first cycles")
            print("faults:", flush=True)
            kill_cycle_holder(report, {w.pid for w in workers})

            # Redis down: submissions still succeed (the cycle request is best effort), retries create nothing.
            stack.stop_redis()
            statuses, ids = submit_batch(base, world.tokens["vision"], API_JOBS // 2, "redis-down")
            stack.restart_redis(down_s=0)
            report.check(
                set(statuses) == {201},
                "50 submissions (each retried) answered 201 while Redis was down",
                str(Counter(statuses)),
            )

            # PostgreSQL down: the API answers 503 JSON with Retry-After, then recovers.
            connection.close()
            stack.postgres.stop()  # type: ignore[union-attr]
            answers = [http("GET", f"{base}/api/v1/jobs/", world.tokens["nlp"]) for _ in range(5)]
            stack.postgres.start()  # type: ignore[union-attr]
            outage_ok = all(
                status == 503 and "Retry-After" in headers and json.loads(body).get("detail")
                for status, headers, body in answers
            )
            report.check(
                outage_ok,
                "API answered 503 JSON with Retry-After while PostgreSQL was down",
                str([a[0] for a in answers]),
            )
            statuses2, ids2 = submit_batch(base, world.tokens["nlp"], API_JOBS // 2, "after-pg")
            report.check(
                set(statuses2) == {201},
                "50 submissions answered 201 after the PostgreSQL restart",
                str(Counter(statuses2)),
            )
            submitted = args.jobs - API_JOBS + len(ids) + len(ids2)

            def all_done() -> bool:
                try:
                    return not Job.objects.exclude(state="Succeeded").exists()
                except Exception:
                    connection.close()
                    return False

            try:
                wait_until(all_done, timeout_s=args.deadline, what="every job to succeed", every_s=1.0)
            except TimeoutError as exc:
                report.check(False, "every job finished within the deadline", str(exc))
            elapsed = time.monotonic() - started
            print(f"checks (after {elapsed:.0f} s, {CycleRun.objects.count()} cycles):", flush=True)
            worker_logs = "".join(stack.log(f"worker{i}").read_text() for i in range(WORKERS))
            report.check("signal 9" in worker_logs, "a worker saw its cycle process die by SIGKILL and carried on")
            from billing.services import metering_run
            from scheduling.adapters.simulated import SimulatedCluster
            from scheduling.invariants import audit_findings

            metering_run()
            states = Counter(Job.objects.values_list("state", flat=True))
            succeeded = Counter(JobTransition.objects.filter(to_state="Succeeded").values_list("job_id", flat=True))
            report.check(
                sum(states.values()) == submitted and states["Succeeded"] == submitted,
                f"every job accounted once: {submitted} submitted, {sum(states.values())} stored",
                str(dict(states)),
            )
            report.check(
                max(succeeded.values(), default=0) == 1 and len(succeeded) == submitted,
                "each job succeeded exactly once",
            )
            findings = audit_findings(backend=SimulatedCluster())
            report.check(not findings, "audit: every history legal, no placement or capacity broken", str(findings[:3]))
            quota_replay(report)
            metering_check(report)
    print(("chaos: all checks passed" if not report.failures else f"chaos: {len(report.failures)} checks FAILED")
          + f" in {time.monotonic() - started:.0f} s", flush=True)  # fmt: skip
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
