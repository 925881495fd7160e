"""Where an API request's time goes: CPU time and queries per request of the load benchmark's endpoints.

Usage: ``DATABASE_URL=... REDIS_URL=... python bench/profile_api.py [--seed] [--requests 40] [--profile NAME]``.

In-process (Django's test client through every middleware, no HTTP server), one request at a time,
against ``DATABASE_URL``: ``--seed`` first fills it as ``bench/bench_load.py`` does (an empty,
migrated database; smaller by default; the seeded users and tokens are kept in ``PROFILE_API_DATA``,
default /tmp/profile_api_users.json). For each endpoint of the load scenario it prints the median
CPU time (``time.process_time``, fair on a loaded machine; median and mean) and wall time per request and the number
of queries; ``--profile NAME`` prints cProfile's top functions for that endpoint. Run it on two
checkouts against the same database to compare them side by side.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
os.environ.setdefault("SECRET_KEY", "bench-only-secret-key-0123456789abcdefghijklmnopqrstuvwxyz")
os.environ.setdefault("SECURE_SSL_REDIRECT", "0")
os.environ.setdefault("API_THROTTLE_IP", "1000000/min")
os.environ.setdefault("API_THROTTLE_USER", "1000000/min")
os.environ.setdefault("CELERY_TASK_ALWAYS_EAGER", "0")

DATA_FILE = Path(os.environ.get("PROFILE_API_DATA", "/tmp/profile_api_users.json"))


def endpoints(job_id: int) -> dict[str, tuple[str, str, dict | None]]:
    submit = {"queue": "default", "image": "nvcr.io/nvidia/pytorch:24.08-py3", "gpu": 1, "runtime_s": 600}
    return {
        "teams": ("get", "/api/v1/teams/", None),
        "job_list": ("get", "/api/v1/jobs/?page_size=20", None),
        "job": ("get", f"/api/v1/jobs/{job_id}/", None),
        "cost_allocation": ("get", "/api/v1/cost/allocation?window=7d&aggregate=namespace", None),
        "submit": ("post", "/api/v1/jobs/", submit),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", action="store_true")
    parser.add_argument("--history", type=int, default=2000)
    parser.add_argument("--backlog", type=int, default=400)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--only", default="", help="comma-separated endpoint names")
    parser.add_argument("--profile", default="", help="an endpoint name: print its cProfile")
    parser.add_argument(
        "--cycle-every",
        type=int,
        default=0,
        help="record a scheduling cycle (a CycleRun row: what dry-run states are keyed on) every N requests",
    )
    args = parser.parse_args()
    import django

    django.setup()
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from scheduling.models import CycleRun

    if args.seed:
        from bench.bench_load import seed

        DATA_FILE.write_text(json.dumps(seed(args.history, args.backlog)))
    users = json.loads(DATA_FILE.read_text())["users"]
    user = users[0]
    client = Client(HTTP_AUTHORIZATION=f"Token {user['token']}")
    print(f"load average {os.getloadavg()[0]:.1f}; {args.requests} requests each, one at a time")
    print(f"{'endpoint':18} {'CPU ms':>8} {'mean':>8} {'wall ms':>8} {'queries':>8}")
    only = set(filter(None, args.only.split(",")))
    for name, (method, path, body) in endpoints(user["job_ids"][0]).items():
        if only and name not in only:
            continue
        call = getattr(client, method)
        kwargs = {"data": json.dumps(body), "content_type": "application/json"} if body else {}
        for _ in range(3):  # warm caches and connections
            response = call(path, **kwargs)
            assert response.status_code < 300, (name, response.status_code, response.content[:300])
        cpu, wall, queries = [], [], []
        profiler = cProfile.Profile(time.process_time) if name == args.profile else None  # CPU, not wall
        for n in range(args.requests):
            if args.cycle_every and n % args.cycle_every == 0:
                CycleRun.objects.create(started_at=timezone.now(), duration_ms=0.0)
            with CaptureQueriesContext(connection) as captured:
                c0, w0 = time.process_time(), time.perf_counter()
                if profiler:
                    profiler.enable()
                response = call(path, **kwargs)
                if profiler:
                    profiler.disable()
                cpu.append(time.process_time() - c0)
                wall.append(time.perf_counter() - w0)
            assert response.status_code < 300, (name, response.status_code)
            queries.append(len(captured))
        print(
            f"{name:18} {statistics.median(cpu) * 1000:8.1f} {statistics.mean(cpu) * 1000:8.1f} "
            f"{statistics.median(wall) * 1000:8.1f} "
            f"{statistics.median(queries):8.0f}",
            flush=True,
        )
        if profiler:
            pstats.Stats(profiler).sort_stats(os.environ.get("PROFILE_SORT", "cumulative")).print_stats(45)
            for q in captured.captured_queries:
                print(f"  {q['time']}s  {q['sql'][:240]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
