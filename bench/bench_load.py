"""Load benchmark: the API under a mixed load while scheduling cycles run, on its own stack.

Usage: ``python bench/bench_load.py [--users 60] [--user-rps 2] [--seconds 60] [--web-workers 2]
[--web-threads 4] [--profile] [--gc]``.
Starts its own PostgreSQL and Redis (free ports, a temporary directory), migrates, seeds 5 teams of
10 members, 64 simulated 8-GPU nodes, a history of finished and metered jobs and a backlog of
pending ones; starts gunicorn, one Celery worker and beat (a cycle every 2 s over the backlog), then
runs Locust headless on the same machine: each user sends ``--user-rps`` requests a second, 80 %
reads (job list 40 %, one job 30 %, cost allocation of the last week 10 %) and 20 % submissions.

Prints requests/s and the 50th/95th/99th percentile latency per endpoint, the failures, the CPU
time of the web, the Celery worker, PostgreSQL and Locust, and the verdict against the target: at
least 100 requests/s at P99 under 300 ms with no error. ``--profile`` (with ``--web-threads 1``)
also prints the web workers' cProfile of CPU time, ``--gc`` their garbage collections
(``bench/gunicorn_profile.py``).

Where the slowest requests came from: the 99th percentile without the first ``WARM_S`` seconds, when
the slowest 1 % ended (per ``WARM_S``-second bin, by endpoint), and the time the web spent on each
request once a thread took it (gunicorn's access log), against what Locust saw (the rest: waiting
for a thread, and the way there and back).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.stack import ROOT, Stack, django_against, free_port, group_cpu_s, wait_until

TEAMS = ("vision", "nlp", "speech", "robotics", "search")
TARGET_RPS, TARGET_P99_MS = 100.0, 300.0
WARM_S = 10  # the tail report's bins: the first one is the start
ACCESS_FORMAT = "%(M)s %(m)s %(U)s"  # gunicorn's access log: ms in the worker, method, path


def seed(history_per_team: int, backlog_per_team: int) -> dict:
    """Teams, nodes, finished and metered history, a pending backlog; returns the Locust data file's content."""
    from datetime import timedelta

    from django.db import connection
    from django.utils import timezone

    from bench.world import jobs_bulk, world_build
    from billing.services import metering_run
    from portal.jobs.models import Job, JobTransition
    from portal.jobs.states import JobState

    world = world_build(teams=TEAMS, nodes=64, members=10)
    now = timezone.now()
    for team in TEAMS:
        ids = jobs_bulk(world, team, history_per_team, runtime_s=3600)
        # A finished history: submitted, admitted a minute later, ran an hour within the last week,
        # succeeded. Each job's own times, submission included: dated at the seeding, 10,000 finished
        # jobs would count as the last hour's submissions, which the forecast expects again every hour
        # (``Policy.arrival_period_s``) in every cycle and every dry-run state.
        rows, jobs = [], []
        for n, job_id in enumerate(ids):
            start = now - timedelta(hours=1 + (n % 150))
            end = start + timedelta(hours=1)
            submitted = start - timedelta(minutes=1)
            detail = {
                "gpu_model": "A100-80GB",
                "gpus": "1.000000",
                "capacity_type": "on-demand",
                "nodes": ["a100-0000"],
            }
            rows += [
                JobTransition(job_id=job_id, from_state="Pending", to_state="Admitted", at=start, detail=detail),
                JobTransition(job_id=job_id, from_state="Admitted", to_state="Running", at=start, detail=detail),
                JobTransition(job_id=job_id, from_state="Running", to_state="Succeeded", at=end, actor="cluster"),
            ]
            jobs.append(
                Job(
                    pk=job_id, state=JobState.SUCCEEDED, attempt=1, created_at=submitted, admitted_at=start,
                    started_at=start, finished_at=end, capacity_type="on-demand",
                )
            )  # fmt: skip
        JobTransition.objects.bulk_create(rows, batch_size=2000)
        Job.objects.bulk_update(
            jobs, ["state", "attempt", "created_at", "admitted_at", "started_at", "finished_at", "capacity_type"],
            batch_size=2000,
        )  # fmt: skip
        with connection.cursor() as cursor:  # the Pending transition at the submission
            cursor.execute(
                "UPDATE jobs_jobtransition t SET at = j.created_at FROM jobs_job j "
                "WHERE t.job_id = j.id AND t.to_state = 'Pending' AND j.id = ANY(%s)",
                [ids],
            )
        jobs_bulk(world, team, backlog_per_team, gpu=2, runtime_s=7200)
    metering_run()
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")  # as autovacuum would after a bulk load: plans from real statistics
    data: dict[str, list[dict]] = {"users": []}
    for team in TEAMS:
        job_ids = list(Job.objects.filter(team__slug=team).order_by("-id").values_list("id", flat=True)[:300])
        data["users"] += [{"token": token, "job_ids": job_ids} for token in world.member_tokens[team]]
    return data


def read_stats(prefix: Path) -> list[dict[str, str]]:
    with open(f"{prefix}_stats.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (nearest rank) of ``values``; 0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def endpoint_of(method: str, path: str) -> str:
    """The Locust name of a request the access log shows (``GET /api/v1/jobs/12/`` -> ``{id}``)."""
    parts = ["{id}" if part.isdigit() else part for part in path.split("/")]
    return f"{method} {'/'.join(parts)}"


def print_tail(log: Path, access: Path) -> None:
    """When the slowest requests came and what the web itself spent on them (see the module docstring)."""
    rows = [line.split(",") for line in log.read_text().splitlines() if line] if log.exists() else []
    if not rows:
        return
    requests = [(float(at), name, float(ms)) for at, name, ms in rows]
    start = min(at - ms / 1000 for at, _, ms in requests)
    latencies = [ms for _, _, ms in requests]
    after = [ms for at, _, ms in requests if at - start >= WARM_S]
    slow = percentile(latencies, 99)
    print(
        f"\nP99 {slow:.0f} ms over the run, {percentile(after, 99):.0f} ms without its first {WARM_S} s; "
        f"the slowest 1 % (≥ {slow:.0f} ms) ended:"
    )
    bins: dict[int, dict[str, int]] = {}
    for at, name, ms in requests:
        if ms >= slow:
            counts = bins.setdefault(int((at - start) // WARM_S), {})
            counts[name] = counts.get(name, 0) + 1
    for index in sorted(bins):
        named = ", ".join(f"{count} {name}" for name, count in sorted(bins[index].items()))
        print(f"  {index * WARM_S:3d}-{(index + 1) * WARM_S:3d} s: {named}")
    if not access.exists():
        return
    served: dict[str, list[float]] = {}
    for line in access.read_text().splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[0].isdigit():
            served.setdefault(endpoint_of(fields[1], fields[2]), []).append(float(fields[0]))
    seen: dict[str, list[float]] = {}
    for _, name, ms in requests:
        seen.setdefault(name, []).append(ms)
    print(f"\n{'endpoint':32} {'in the web: P50':>16} {'P99':>7}   {'Locust: P50':>12} {'P99':>7}  (ms)")
    for name in sorted(seen):
        web = served.get(name, [])
        print(
            f"{name:32} {percentile(web, 50):16.0f} {percentile(web, 99):7.0f}   "
            f"{percentile(seen[name], 50):12.0f} {percentile(seen[name], 99):7.0f}"
        )


def stop_web(stack: Stack) -> None:
    """Stop gunicorn: its workers write their profiles and collections as they exit."""
    os.killpg(stack.web_process.pid, signal.SIGTERM)
    stack.web_process.wait(timeout=30)


def print_collections(stack: Stack, started_at: float) -> None:
    """The web workers' garbage collections during the run: how many of each generation, how long
    they held their process (total, longest), and the longest ones with when they came."""
    pauses: list[tuple[float, int, float]] = []
    tracked = []
    for path in stack.tmp.glob("gc-*.json"):
        data = json.loads(path.read_text())
        pauses += [tuple(c) for c in data["collections"] if c[0] >= started_at]
        tracked.append(data["tracked"])
    print(f"\ngarbage collections in the web workers (objects tracked at the end: {tracked}):")
    for generation in (0, 1, 2):
        these = [s for _, g, s in pauses if g == generation]
        if these:
            print(
                f"  generation {generation}: {len(these)}, {sum(these) * 1000:.0f} ms in all, "
                f"longest {max(these) * 1000:.0f} ms"
            )
    longest = sorted(pauses, key=lambda c: -c[2])[:5]
    print("  longest: " + ", ".join(f"{s * 1000:.0f} ms (gen {g}, at {at - started_at:.0f} s)" for at, g, s in longest))


def print_profile(stack: Stack) -> None:
    """Print the top functions of the web workers' profiles (written as they exited)."""
    import pstats

    files = [str(path) for path in stack.tmp.glob("web-*.prof")]
    if not files:
        print("no profile written")
        return
    stats = pstats.Stats(*files)
    stats.sort_stats("cumulative").print_stats(60)
    stats.sort_stats("tottime").print_stats(30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=60)
    parser.add_argument("--user-rps", type=float, default=2.0)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--web-workers", type=int, default=2)
    parser.add_argument("--web-threads", type=int, default=4)
    parser.add_argument("--history", type=int, default=2000, help="finished jobs per team")
    parser.add_argument("--backlog", type=int, default=400, help="pending jobs per team")
    parser.add_argument(
        "--worker-nice", type=int, default=0, help="run the Celery worker (the cycles) at this nice level"
    )
    parser.add_argument("--keep", action="store_true")
    parser.add_argument(
        "--profile", action="store_true", help="cProfile the web workers' CPU; prints their top functions"
    )
    parser.add_argument("--gc", action="store_true", help="record the web workers' garbage collections; prints them")
    args = parser.parse_args()
    with Stack("load", keep=args.keep) as stack:
        env = stack.environment(
            DATABASE_URL=stack.start_postgres(free_port()), REDIS_URL=stack.start_redis(free_port()),
            SECRET_KEY="bench-only-secret-key-0123456789abcdefghijklmnopqrstuvwxyz", SECURE_SSL_REDIRECT="0",
            CELERY_QUEUE="load", CELERY_TASK_ALWAYS_EAGER="0", SCHEDULER_INTERVAL_S="2", SIM_SPEEDUP="60",
            METERING_INTERVAL_S="30", CLUSTER_SYNC_INTERVAL_S="10", DB_CONN_MAX_AGE="60", LOG_LEVEL="WARNING",
            API_THROTTLE_IP="1000000/min",  # every simulated user comes from 127.0.0.1
        )  # fmt: skip
        stack.manage("migrate", "--noinput")
        print(f"seeding: {len(TEAMS)} teams × 10 users, {args.history} finished and {args.backlog} pending jobs each")
        with django_against(env):
            from django.db import connection

            from scheduling.models import CycleRun

            data = seed(args.history, args.backlog)
            connection.close()
            data_file = stack.tmp / "locust-data.json"
            data_file.write_text(json.dumps(data))
            worker = stack.worker(0, "load", nice=args.worker_nice)
            stack.beat()
            wait_until(lambda: CycleRun.objects.exists(), timeout_s=60, what="the first cycle")
            access = stack.tmp / "access.log"
            extra: tuple[str, ...] = ("--access-logfile", str(access), "--access-logformat", ACCESS_FORMAT)
            if args.profile:
                env["BENCH_PROFILE_DIR"] = str(stack.tmp)  # env is the stack's environment
            if args.gc:
                env["BENCH_GC_DIR"] = str(stack.tmp)
            if args.profile or args.gc:
                extra += ("-c", str(ROOT / "bench" / "gunicorn_profile.py"))
            base = stack.web(free_port(), workers=args.web_workers, threads=args.web_threads, extra=extra)
            connection.close()
            prefix, requests_log = stack.tmp / "locust", stack.tmp / "requests.csv"
            print(
                f"load: {args.users} users × {args.user_rps:g} req/s for {args.seconds} s against {base} "
                f"({args.web_workers} gunicorn workers × {args.web_threads} threads, worker nice {args.worker_nice})",
                flush=True,
            )
            started, started_at = time.monotonic(), time.time()
            cycles_before = CycleRun.objects.count()
            connection.close()
            web_cpu_s, worker_cpu_s = group_cpu_s(stack.web_process), group_cpu_s(worker)
            assert stack.postgres is not None
            postgres_cpu_s, children = stack.postgres.cpu_s(), resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run(
                [sys.executable, "-m", "locust", "-f", str(ROOT / "bench" / "locustfile.py"), "--headless",
                 "-u", str(args.users), "-r", str(args.users), "-t", f"{args.seconds}s", "--host", base,
                 "--csv", str(prefix), "--only-summary", "--loglevel", "WARNING"],
                env={**env, "BENCH_LOAD_DATA": str(data_file), "BENCH_LOAD_USER_RPS": str(args.user_rps),
                     "BENCH_LOAD_LOG": str(requests_log)},
                check=False, stdout=subprocess.DEVNULL, stderr=stack.log("locust").open("w"),
            )  # fmt: skip
            after = resource.getrusage(resource.RUSAGE_CHILDREN)  # Locust, the only child waited for
            locust_cpu_s = after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime
            postgres_cpu_s = stack.postgres.cpu_s() - postgres_cpu_s  # its backends of the web: still open
            web_cpu_s = group_cpu_s(stack.web_process) - web_cpu_s
            worker_cpu_s = group_cpu_s(worker) - worker_cpu_s
            cycles = CycleRun.objects.filter(started_at__isnull=False).count() - cycles_before
            elapsed = time.monotonic() - started
            durations = list(CycleRun.objects.order_by("-started_at").values_list("duration_ms", flat=True)[:cycles])
            if args.profile or args.gc:
                stop_web(stack)
            if args.profile:
                print_profile(stack)
            if args.gc:
                print_collections(stack, started_at)
        rows = read_stats(prefix)
        print_tail(requests_log, access)
    print(f"\n{'endpoint':32} {'req/s':>7} {'P50 ms':>7} {'P95 ms':>7} {'P99 ms':>7} {'fail':>5} {'count':>7}")
    total = None
    for row in rows:
        name = row["Name"] if row["Name"] != "Aggregated" else "all"
        line = (
            f"{name:32} {float(row['Requests/s']):7.1f} {row['50%']:>7} {row['95%']:>7} {row['99%']:>7} "
            f"{row['Failure Count']:>5} {row['Request Count']:>7}"
        )
        print(line)
        if row["Name"] == "Aggregated":
            total = row
    mean_cycle = sum(durations) / len(durations) if durations else 0.0
    print(f"\n{cycles} scheduling cycles ran during the {elapsed:.0f} s (mean {mean_cycle:.0f} ms each)")
    assert total is not None
    served = int(total["Request Count"])
    print(
        f"CPU: web {web_cpu_s:.1f} s ({web_cpu_s / max(served, 1) * 1000:.1f} ms a request), Celery worker "
        f"{worker_cpu_s:.1f} s, PostgreSQL {postgres_cpu_s:.1f} s ({postgres_cpu_s / max(served, 1) * 1000:.1f} ms a "
        f"request), Locust {locust_cpu_s:.1f} s; load average {os.getloadavg()[0]:.1f} at the end"
    )
    rps, p99, failures = float(total["Requests/s"]), float(total["99%"]), int(total["Failure Count"])
    met = rps >= TARGET_RPS and p99 < TARGET_P99_MS and failures == 0
    print(
        f"target ≥ {TARGET_RPS:g} req/s at P99 < {TARGET_P99_MS:g} ms, 0 errors: "
        f"{'met' if met else 'NOT met'} ({rps:.1f} req/s, P99 {p99:g} ms, {failures} errors)"
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
