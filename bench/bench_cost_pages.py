"""Benchmark: server time of the cost and what-if pages with 100,000 jobs and a year of usage.

Usage (PostgreSQL; the database is created if missing and filled once, then reused):

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/portal_bench_pages .venv/bin/python bench/bench_cost_pages.py

Options: ``--jobs N`` (100,000), ``--records N`` (1,000,000 usage records over the last 365 days),
``--namespaces N`` (100), ``--repeat N`` (7), ``--rebuild``. Target (issue 12): every page <= 300 ms.

Steps:
1. Fill (only when missing or ``--rebuild``): teams, jobs, usage records with labels (COPY) ending now,
   the hourly rollups (``bench_allocation``'s: per queue, and per job owner and label set, which the
   breakdowns read), and one attempt per job (admitted, ran, ended; one in five borrowed), so the
   breakdowns and the what-if read what the portal would have written, in the order it writes it.
2. Time each page through Django's test client in this process (URL resolution, middleware, view,
   selectors, SQL, template; no network), as a platform admin and as a member of one team: median and
   worst wall time of ``--repeat`` after one warm-up, and the median CPU time of this process (under
   load from other processes, wall time is mostly waiting; CPU time is the fairer comparison). The
   what-if result page is timed as the admin who ran it.
3. Time one what-if replay of the last 7 days (a Celery task, not a page) and its result page.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
os.environ.setdefault("SECRET_KEY", "bench-only-secret-key-not-for-production-0123456789")
os.environ.setdefault("SECURE_SSL_REDIRECT", "0")
os.environ.setdefault("STATIC_STORAGE", "simple")

SEED = 12
NOW = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
START = NOW - timedelta(days=365)
PROJECTS = ["lidar", "llm", "vision-core", "speech", "recsys"]


def fill(*, jobs: int, records: int, namespaces: int) -> None:
    import bench.bench_allocation as alloc

    # The allocation benchmark's generator over this benchmark's year (its records end "now").
    alloc.START, alloc.END = START, NOW
    rng = random.Random(SEED)
    teams, job_rows = alloc._teams_and_jobs(namespaces=namespaces, jobs_per_team=max(1, jobs // namespaces))
    recs = alloc._generated_records(rng, teams=teams, jobs=job_rows, records=records)
    # Labels as metering adds them (the owner), and a project per job.
    recs = [
        replace(r, labels={"owner": "bench", "kind": "training", "project": PROJECTS[r.job_id % len(PROJECTS)]})
        for r in recs
    ]
    alloc._copy_records(recs, namespaces_by_id={t.pk: t.namespace for t in teams})
    alloc.derived_rollups()
    _attempts(rng, job_rows)
    _member(teams[0])


def _attempts(rng: random.Random, job_rows) -> None:
    """One attempt per job over the year: queued, admitted after a wait, ran 5 min to 6 h."""
    from portal.jobs.models import JobAttempt

    t0 = time.perf_counter()
    span_s = int((NOW - START).total_seconds())
    attempts = []
    for job in job_rows:
        queued = START + timedelta(seconds=rng.randrange(span_s))
        admitted = queued + timedelta(seconds=rng.randrange(0, 3600))
        ended = min(NOW, admitted + timedelta(seconds=rng.randrange(300, 6 * 3600)))
        share = rng.choice([7000, 14000, 28000, 3500, 1000])
        attempts.append(
            JobAttempt(job_id=job.pk, number=1, queued_at=queued, admitted_at=admitted, started_at=admitted,
                       ended_at=ended, outcome="Succeeded", gpu_model="A100-80GB", capacity_type="on-demand",
                       borrowed=rng.random() < 0.2, replicas=1, gpu_share_7000ths=share, nodes=["bench-0"])
        )  # fmt: skip
    JobAttempt.objects.bulk_create(attempts, batch_size=5000)
    _jobs_from_attempts()
    print(f"{len(attempts)} attempts in {time.perf_counter() - t0:.1f} s", flush=True)


def _jobs_from_attempts() -> None:
    """Each job's times as its one attempt says (one UPDATE; Django's bulk_update takes minutes here)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE jobs_job j SET created_at = a.queued_at, admitted_at = a.admitted_at, started_at = a.started_at,"
            " finished_at = a.ended_at, attempt = 1, gpu = GREATEST(1, a.gpu_share_7000ths / 7000)"
            " FROM jobs_jobattempt a WHERE a.job_id = j.id AND a.number = 1"
        )


def _member(team) -> None:
    from django.contrib.auth import get_user_model

    from portal.tenants.models import Membership

    User = get_user_model()
    member, _ = User.objects.get_or_create(username="bench-member")
    Membership.objects.get_or_create(user=member, team=team, defaults={"role": Membership.Role.TEAM_ADMIN})
    User.objects.get_or_create(username="bench-admin", defaults={"is_staff": True, "is_superuser": True})


def _cluster() -> None:
    """100 simulated 8-GPU A100 nodes and the bench queue's quota of them (idempotent), for the replay."""
    from portal.jobs.models import ClusterQueue, FlavorQuota, GpuModel
    from scheduling.models import SimNode

    a100 = GpuModel.objects.get(name="A100-80GB")
    cq = ClusterQueue.objects.get(name="bench")
    FlavorQuota.objects.get_or_create(cluster_queue=cq, gpu_model=a100, defaults={"nominal_gpus": 800})
    for i in range(100):
        SimNode.objects.get_or_create(
            name=f"bench-{i:03d}",
            defaults={"gpu_model": a100, "gpu_count": 8, "cpu_milli": 96_000, "memory_mib": 1024 * 1024},
        )


def time_page(client, url: str, repeat: int) -> tuple[float, float, float]:
    """Median and worst wall time and median CPU time (this process: PostgreSQL's own is in the wall
    time only) of ``repeat`` requests after one warm-up, in ms."""
    response = client.get(url)  # warm-up
    assert response.status_code == 200, (url, response.status_code)
    times, cpu = [], []
    for _ in range(repeat):
        c0 = time.process_time()
        t0 = time.perf_counter()
        response = client.get(url)
        times.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
        assert response.status_code == 200
    return statistics.median(times), max(times), statistics.median(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--namespaces", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--rebuild", action="store_true")
    args = parser.parse_args()

    import portal.wsgi  # noqa: F401 - set up as a web worker is (warm-up and all)
    from bench.bench_allocation import ensure_database

    ensure_database()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test import Client

    from billing.models import UsageRecord
    from billing.services import price_book_seed_defaults
    from portal.jobs.models import JobAttempt
    from portal.whatif.models import WhatIfRun
    from portal.whatif.services import whatif_run

    settings.ALLOWED_HOSTS = ["*"]
    price_book_seed_defaults()
    if args.rebuild or UsageRecord.objects.count() != args.records or JobAttempt.objects.count() < args.jobs:
        fill(jobs=args.jobs, records=args.records, namespaces=args.namespaces)
    print(f"data: {UsageRecord.objects.count()} usage records over 365 days, {JobAttempt.objects.count()} attempts")

    from portal.tenants.models import Team

    _jobs_from_attempts()  # idempotent: repairs a fill cut short after the attempts
    _member(Team.objects.filter(slug__startswith="bench-").order_by("slug").first())
    _cluster()
    # 3 first: a stored run for the result page.
    admin = get_user_model().objects.get(username="bench-admin")
    run = WhatIfRun.objects.create(
        created_by=admin,
        window_from=NOW - timedelta(days=7),
        window_to=NOW,
        changes={"cluster_queues": {"bench": {"weight": 2.0}}},
    )
    t0 = time.perf_counter()
    run = whatif_run(run_id=run.pk)
    replay_s = time.perf_counter() - t0
    print(
        f"what-if replay of 7 days: {replay_s:.1f} s ({run.result.get('jobs')} jobs, {run.result.get('cycles')} cycles)"
    )

    pages = [
        "/cost/?window=24h",
        "/cost/?window=7d",
        "/cost/?window=30d",
        "/cost/breakdown/?window=7d",
        "/cost/breakdown/?window=30d",
        "/cost/recommendations/?window=7d",
        "/cost/recommendations/?window=30d",
        "/whatif/",
    ]
    # A web worker (portal.wsgi) freezes what it loads at start; this process also holds the fill's and
    # the replay's objects, set aside the same way so collections cost what they cost in a worker.
    import gc

    gc.collect()
    gc.freeze()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'page':32} {'as':8} {'median ms':>10} {'worst ms':>9} {'CPU ms med':>11}")
    for username in ("bench-admin", "bench-member"):
        client = Client()
        client.force_login(get_user_model().objects.get(username=username))
        # A run's page is its author's (and platform admins').
        for url in pages + ([f"/whatif/{run.pk}/"] if username == "bench-admin" else []):
            median, worst, cpu = time_page(client, url, args.repeat)
            flag = "" if median <= 300 else "  over 300 ms"
            print(
                f"{url:32} {username.removeprefix('bench-'):8} {median:10.1f} {worst:9.1f} {cpu:11.1f}{flag}",
                flush=True,
            )


if __name__ == "__main__":
    main()
