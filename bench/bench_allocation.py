"""Benchmark: the cost allocation query over 30 days, hourly step, 100 namespaces, 1,000,000 usage records.

Usage (PostgreSQL; the database is created if missing and filled once, then reused):

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/portal_bench .venv/bin/python bench/bench_allocation.py

Options: ``--records N`` (default 1,000,000), ``--namespaces N`` (100), ``--rebuild`` (drop the generated
data and fill again), ``--repeat N`` (timed runs, default 7). Target (issue 6): under 500 ms.

Steps:
1. Fill (only when the data set is missing or ``--rebuild``): teams, one local queue each, jobs, usage
   records (COPY), and the hourly rollups computed by ``billing.core.usage`` (``rollup_increments``,
   ``group_increments``) from the same records, so the benchmark reads exactly what metering would have
   written, in the order it writes them (records as their intervals close, rollup rows hour after hour).
2. Time ``billing.selectors.cost_allocation`` (SQL + assembly) and, separately, rendering it as the
   API's JSON; report median and worst of ``--repeat`` runs after one warm-up.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
os.environ.setdefault("SECRET_KEY", "bench-only-secret-key-not-for-production-0123456789")

SEED = 6
END = datetime(2026, 11, 1, tzinfo=UTC)
START = END - timedelta(days=30)
COMBOS = [("A100-80GB", "on-demand"), ("A100-80GB", "spot"), ("H100-80GB", "on-demand"), ("T4", "spot")]
SHARES = [7000, 14000, 28000, 56000, 1750, 3500, 3000, 1000]  # 1, 2, 4, 8 GPUs, ¼, ½, 3g, 1g


@dataclass(frozen=True, slots=True)
class Rec:
    job_id: int
    team_id: int
    local_queue: str
    cluster_queue: str
    gpu_model: str
    capacity_type: str
    start: datetime
    end: datetime
    gpu_share_7000ths: int
    duration_us: int
    cpu_milli_us: int
    memory_mib_us: int
    gpu_util_pct: float | None
    labels: dict[str, str] = field(default_factory=dict)


def ensure_database() -> None:
    import psycopg
    from django.conf import settings

    db = settings.DATABASES["default"]
    if db["ENGINE"] != "django.db.backends.postgresql":
        sys.exit("the benchmark needs PostgreSQL: set DATABASE_URL=postgres://...")
    dsn = f"host={db['HOST'] or '127.0.0.1'} port={db['PORT'] or 5432} user={db['USER']} dbname=postgres"
    if db.get("PASSWORD"):
        dsn += f" password={db['PASSWORD']}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [db["NAME"]]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{db["NAME"]}"')


def fill(*, records: int, namespaces: int) -> None:
    """Step 1: teams and jobs, usage records and their hourly rollup, then the derived rollups."""
    rng = random.Random(SEED)
    teams, jobs = _teams_and_jobs(namespaces=namespaces, jobs_per_team=max(1, records // namespaces // 10))
    recs = _generated_records(rng, teams=teams, jobs=jobs, records=records)
    _copy_records(recs, namespaces_by_id={t.pk: t.namespace for t in teams})
    derived_rollups()


def _teams_and_jobs(*, namespaces: int, jobs_per_team: int) -> tuple[list[Any], list[Any]]:
    from django.contrib.auth import get_user_model
    from django.db import transaction

    from billing.models import CapacitySnapshot, UsageHourly, UsageRecord
    from portal.jobs.models import ClusterQueue, GpuModel, Job, LocalQueue, PriorityClass
    from portal.tenants.models import Team

    t0 = time.perf_counter()
    with transaction.atomic():
        UsageHourly.objects.all().delete()
        UsageRecord.objects.all().delete()
        Job.objects.filter(name__startswith="bench-").delete()
        LocalQueue.objects.filter(team__slug__startswith="bench-").delete()
        Team.objects.filter(slug__startswith="bench-").delete()
        CapacitySnapshot.objects.all().delete()
        for name, memory in (("A100-80GB", 80), ("H100-80GB", 80), ("T4", 16)):
            GpuModel.objects.get_or_create(name=name, defaults={"memory_gib": memory})
        cq, _ = ClusterQueue.objects.get_or_create(name="bench")
        priority, _ = PriorityClass.objects.get_or_create(name="bench", defaults={"value": 100})
        user, _ = get_user_model().objects.get_or_create(username="bench")
        teams = [
            Team.objects.create(name=f"Bench {i:03d}", slug=f"bench-{i:03d}", namespace=f"bench-{i:03d}")
            for i in range(namespaces)
        ]
        queues = [LocalQueue.objects.create(name="default", team=t, cluster_queue=cq) for t in teams]
        jobs = Job.objects.bulk_create(
            [
                Job(
                    name=f"bench-{t.slug}-{j}",
                    owner=user,
                    team=t,
                    local_queue=q,
                    image="bench",
                    priority_class=priority,
                    state="Succeeded",
                )
                for t, q in zip(teams, queues, strict=True)
                for j in range(jobs_per_team)
            ],
            batch_size=5000,
        )
        CapacitySnapshot.objects.bulk_create(
            CapacitySnapshot(at=START - timedelta(days=1), gpu_model=m, capacity_type=c, gpu_count=800, node_count=100)
            for m, c in COMBOS
        )
    print(f"teams and {len(jobs)} jobs in {time.perf_counter() - t0:.1f} s", flush=True)
    return teams, jobs


def _generated_records(rng: random.Random, *, teams: list[Any], jobs: list[Any], records: int) -> list[Rec]:
    t0 = time.perf_counter()
    combos_of = {t.pk: rng.sample(COMBOS, 2) for t in teams}
    recs: list[Rec] = []
    span_s = int((END - START).total_seconds())
    for index in range(records):
        job = jobs[index % len(jobs)]
        model, ctype = rng.choice(combos_of[job.team_id])
        start = START + timedelta(seconds=rng.randrange(span_s), microseconds=rng.randrange(10**6))
        end = min(END, start + timedelta(seconds=rng.randrange(300, 6 * 3600)))
        delta = end - start
        micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
        share = rng.choice(SHARES)
        recs.append(
            Rec(job.pk, job.team_id, "default", "bench", model, ctype, start, end, share, micros,
                2000 * micros, 8192 * micros, rng.choice([None, 12.5, 48.0, 93.0]))
        )  # fmt: skip
    recs.sort(key=lambda r: (r.end, r.job_id))  # metering writes a record when its interval closes
    print(f"{len(recs)} records generated in {time.perf_counter() - t0:.1f} s", flush=True)
    return recs


def _copy_records(recs: list[Rec], *, namespaces_by_id: dict[int, str]) -> None:
    """The records and the hourly rollups computed from them (per queue; per job owner and label set),
    by COPY, each rollup hour after hour as metering writes them."""
    from django.db import connection, transaction

    from billing.core.usage import group_increments, rollup_increments
    from billing.services.rollups import group_rollup_rows
    from portal.jobs.models import Job

    t0 = time.perf_counter()
    with transaction.atomic(), connection.cursor() as cursor:
        columns = (
            'job_id, team_id, namespace, local_queue, cluster_queue, gpu_model, capacity_type, start, "end", gpus, '
            "gpu_seconds, cpu_core_seconds, memory_gib_seconds, gpu_share_7000ths, duration_us, gpu_usage, "
            "cpu_milli_us, memory_mib_us, gpu_util_pct, labels"
        )
        with cursor.cursor.copy(f"COPY billing_usagerecord ({columns}) FROM STDIN") as copy:
            for r in recs:
                gpu_usage = r.gpu_share_7000ths * r.duration_us
                copy.write_row(
                    (
                        r.job_id, r.team_id, namespaces_by_id[r.team_id], r.local_queue, r.cluster_queue, r.gpu_model,
                        r.capacity_type, r.start, r.end, Decimal(r.gpu_share_7000ths) / 7000,
                        Decimal(gpu_usage) / 7_000_000_000, Decimal(r.cpu_milli_us) / 1_000_000_000,
                        Decimal(r.memory_mib_us) / 1_024_000_000, r.gpu_share_7000ths, r.duration_us, gpu_usage,
                        r.cpu_milli_us, r.memory_mib_us, r.gpu_util_pct, json.dumps(r.labels),
                    )
                )  # fmt: skip
        print(f"records copied in {time.perf_counter() - t0:.1f} s", flush=True)
        t0 = time.perf_counter()
        increments = rollup_increments(recs)
        with cursor.cursor.copy(
            "COPY billing_usagehourly (epoch_hour, team_id, local_queue, cluster_queue, gpu_model, capacity_type, "
            "gpu_usage, cpu_milli_us, memory_mib_us, gpu_util_usage, gpu_util_measured_usage) FROM STDIN"
        ) as copy:
            for key, values in sorted(increments.items()):
                copy.write_row((*key, *values.as_row()))
        owners = dict(Job.objects.values_list("pk", "owner_id"))
        groups = group_rollup_rows(group_increments(recs, owners))
        with cursor.cursor.copy(
            "COPY billing_usagegrouphourly (epoch_hour, team_id, owner_id, labels_hash, labels_text, labels, "
            "gpu_model, capacity_type, gpu_usage, cpu_milli_us, memory_mib_us, gpu_util_usage, "
            "gpu_util_measured_usage) FROM STDIN"
        ) as copy:
            for row in groups:
                copy.write_row(row)
    print(f"{len(increments)} hourly and {len(groups)} owner and label rollup rows in {time.perf_counter() - t0:.1f} s")


def derived_rollups() -> None:
    """The per-model allocation and the priced per-team rollup, from the hourly rollup (as metering does)."""
    from django.db import connection, transaction

    from billing.services import cost_rollup_reprice

    t0 = time.perf_counter()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM billing_gpuallocationhourly")
        cursor.execute(
            "INSERT INTO billing_gpuallocationhourly (epoch_hour, gpu_model, capacity_type, gpu_usage)"
            " SELECT epoch_hour, gpu_model, capacity_type, SUM(gpu_usage) FROM billing_usagehourly"
            " GROUP BY epoch_hour, gpu_model, capacity_type ORDER BY epoch_hour"
        )
        rows = cost_rollup_reprice()
        for table in (
            "billing_usagerecord",
            "billing_usagehourly",
            "billing_usagegrouphourly",
            "billing_gpuallocationhourly",
            "billing_teamcosthourly",
            "billing_teamcostdaily",
        ):
            cursor.execute(f"ANALYZE {table}")
    print(f"{rows} priced team-hours in {time.perf_counter() - t0:.1f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--namespaces", type=int, default=100)
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--step", default="1h")
    args = parser.parse_args()

    import django

    django.setup()
    ensure_database()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)

    from billing.api.render import allocation_json
    from billing.models import UsageRecord
    from billing.selectors import AllocationQuery, cost_allocation, cost_rollup_current
    from billing.services import price_book_seed_defaults

    price_book_seed_defaults()
    if args.rebuild or UsageRecord.objects.count() != args.records:
        fill(records=args.records, namespaces=args.namespaces)
    elif not cost_rollup_current():
        derived_rollups()

    step_hours = {"1h": 1, "1d": 24}[args.step]
    query = AllocationQuery(start=START, end=END, step_hours=step_hours, aggregate="namespace", show_idle=True)
    timings, render, cpu = [], [], []
    allocation = cost_allocation(query, now=END)  # warm-up
    for _ in range(args.repeat):
        c0 = time.process_time()
        t0 = time.perf_counter()
        allocation = cost_allocation(query, now=END)
        t1 = time.perf_counter()
        cpu.append((time.process_time() - c0) * 1000)
        body = json.dumps(allocation_json(allocation), default=str)
        t2 = time.perf_counter()
        timings.append((t1 - t0) * 1000)
        render.append((t2 - t1) * 1000)
    groups = sum(len(groups) for _, _, groups in allocation.steps)
    print(
        f"allocation 30d/{args.step}/namespace, {UsageRecord.objects.count():,} records, "
        f"{len(allocation.steps)} steps, {groups:,} step×group figures, {len(allocation.totals)} groups"
    )
    print(f"  query + assembly: median {statistics.median(timings):.0f} ms, worst {max(timings):.0f} ms wall clock")
    print(f"  of which Python CPU in this process: median {statistics.median(cpu):.0f} ms")
    print(f"  load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"  JSON rendering:   median {statistics.median(render):.0f} ms ({len(body) / 1e6:.1f} MB)")
    target = statistics.median(timings)
    print("  target 500 ms:", "met" if target < 500 else "NOT met")


if __name__ == "__main__":
    main()
