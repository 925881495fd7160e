"""Benchmark: server time of the operations pages with 100,000 jobs and a year of history in PostgreSQL.

Usage (PostgreSQL; the database is created if missing and filled once, then reused):

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/portal_pages_bench .venv/bin/python bench/bench_pages.py

Options: ``--jobs N`` (default 100,000), ``--rebuild`` (drop the generated data and fill again),
``--repeat N`` (timed requests per page, default 9), ``--sample-days N`` (days of queue samples, 365).
Target (issue 12): every page at most 300 ms server time (median).

Steps:
1. Fill (only when the data set is missing or ``--rebuild``): 3 GPU models, 8 teams with a ClusterQueue
   each in one cohort, 64 nodes (8 racks, 2 node pools, MIG nodes, cordoned and spot ones); ``--jobs``
   jobs over the last year: finished ones with their attempt (queued, admitted, ran, ended) and usage
   record (COPY, with the hourly rollups metering derives), about 380 running on the nodes with their
   placements, 500 pending with a queue position and a reason; queue samples every 5 minutes.
2. Time each page in-process (Django's test client: URL routing, middleware, view, selectors, SQL,
   template; no network) as a platform admin and as a team member; print the median and worst wall
   time of ``--repeat`` requests after one warm-up, the median CPU time of this process (PostgreSQL's
   own time is in the wall time only), and whether the median is within 300 ms. The Queues page's
   charts load after the page (htmx) and are timed as a request of their own.

Pages are listed in ``PAGES``; another page (the what-if and cost pages) is one more line there.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
os.environ.setdefault("SECRET_KEY", "bench-only-secret-key-not-for-production-0123456789")
os.environ.setdefault("CLUSTER_BACKEND", "simulated")
# Static URLs without a collected manifest (what the tests do): the pages, not collectstatic, are timed.
os.environ.setdefault("STATIC_STORAGE", "simple")

from bench.bench_allocation import Rec, ensure_database

SEED = 12
TARGET_MS = 300.0
TEAMS = [f"team{i}" for i in range(8)]
MODELS: tuple[tuple[str, int, list[str]], ...] = (
    ("A100-80GB", 80, ["1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"]),
    ("H100-80GB", 80, []),
    ("T4", 16, []),
)
# (name, url, user): "admin" is a platform admin, "member" a member of team0.
PAGES: list[tuple[str, str, str]] = [
    ("cluster page (admin)", "/cluster/", "admin"),
    ("cluster page (member)", "/cluster/", "member"),
    ("cluster page, filtered", "/cluster/?gpu_model=A100-80GB&state=partial", "member"),
    ("node page", "/cluster/nodes/node-a100-00/", "member"),
    ("queues page (admin)", "/queues/", "admin"),
    ("queues page (member)", "/queues/", "member"),
    ("queues page's charts", "/queues/charts/", "member"),
    ("GET /api/v1/cluster/", "/api/v1/cluster/", "member"),
    ("GET /api/v1/fairness/", "/api/v1/fairness/", "member"),
]


def fill(*, jobs: int, sample_days: int, now: datetime) -> None:
    """Step 1 (see the module docstring)."""
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction

    from bench.bench_allocation import _copy_records, derived_rollups
    from billing.models import UsageHourly, UsageRecord
    from portal.jobs.models import ClusterQueue, FlavorQuota, GpuModel, LocalQueue, PriorityClass
    from portal.ops.models import QueueSample
    from portal.tenants.models import Membership, Team
    from scheduling.models import NodePool, SimNode

    rng = random.Random(SEED)
    t0 = time.perf_counter()
    with transaction.atomic():
        UsageHourly.objects.all().delete()
        UsageRecord.objects.all().delete()
        with connection.cursor() as cursor:  # TRUNCATE: the quota history is append-only row by row
            cursor.execute("TRUNCATE jobs_job, jobs_quotachange, ops_queuesample CASCADE")
        LocalQueue.objects.all().delete()
        FlavorQuota.objects.all().delete()
        ClusterQueue.objects.all().delete()
        SimNode.objects.all().delete()
        NodePool.objects.all().delete()
        Team.objects.all().delete()
        models = {
            name: GpuModel.objects.update_or_create(name=name, defaults={"memory_gib": gib, "mig_profiles": mig})[0]
            for name, gib, mig in MODELS
        }
        priorities = [
            PriorityClass.objects.get_or_create(name=n, defaults={"value": v})[0]
            for n, v in (("low", 100), ("default", 500), ("high", 1000))
        ]
        users = get_user_model().objects
        admin = users.filter(username="bench-admin").first() or users.create_user(
            "bench-admin", password="bench", is_staff=True, is_superuser=True
        )
        member = users.filter(username="bench-member").first() or users.create_user("bench-member", password="bench")
        teams, queues = [], []
        for i, slug in enumerate(TEAMS):
            team = Team.objects.create(name=slug.title(), slug=slug, namespace=f"ns-{slug}")
            teams.append(team)
            cq = ClusterQueue.objects.create(name=f"cq-{slug}", cohort="bench", weight=1.0 + (i % 3))
            for order, (model, nominal) in enumerate((("A100-80GB", 30), ("H100-80GB", 14), ("T4", 8))):
                FlavorQuota.objects.create(cluster_queue=cq, gpu_model=models[model], nominal_gpus=nominal, order=order)
            queues.append(LocalQueue.objects.create(name="default", team=team, cluster_queue=cq))
        Membership.objects.create(user=member, team=teams[0])
        NodePool.objects.create(name="training", node_selector={"pool": "training"}, placement="binpack", order=0)
        NodePool.objects.create(name="shared", node_selector={"pool": "shared"}, overcommit_ratio=1.5, order=1)
        nodes = _nodes(models)
        SimNode.objects.bulk_create(nodes)
        print(f"world: {len(teams)} teams, {len(nodes)} nodes in {time.perf_counter() - t0:.1f} s", flush=True)
        owner_of = {t.pk: member if t.slug == "team0" else admin for t in teams}
        recs = _jobs(rng, jobs=jobs, teams=teams, queues=queues, priorities=priorities, nodes=nodes,
                     owner_of=owner_of, now=now)  # fmt: skip
    _copy_records(recs, namespaces_by_id={t.pk: t.namespace for t in teams})
    derived_rollups()
    _samples(rng, days=sample_days, now=now)
    with connection.cursor() as cursor:
        for table in ("jobs_job", "jobs_jobattempt", "jobs_replicaplacement", QueueSample._meta.db_table):
            cursor.execute(f"ANALYZE {table}")
    print(f"filled in {time.perf_counter() - t0:.1f} s", flush=True)


def _nodes(models: dict[str, Any]) -> list[Any]:
    from scheduling.models import SimNode

    out = []
    for i in range(64):
        model = "A100-80GB" if i < 32 else "H100-80GB" if i < 48 else "T4"
        labels = {"topology.kubernetes.io/rack": f"r{i % 8}", "pool": "training" if i % 4 else "shared"}
        labels["karpenter.sh/capacity-type"] = "spot" if model == "T4" else "on-demand"
        out.append(
            SimNode(
                name=f"node-{model.split('-')[0].lower()}-{i:02d}",
                gpu_model=models[model],
                gpu_count=4 if model == "T4" else 8,
                cpu_milli=128_000,
                memory_mib=1024 * 1024,
                labels=labels,
                taints=[{"key": "spot", "value": "true", "effect": "NoSchedule"}] if model == "T4" else [],
                unschedulable=i in (30, 47),
                mig_enabled=i in (28, 29),
            )
        )
    return out


def _jobs(rng, *, jobs, teams, queues, priorities, nodes, owner_of, now) -> list[Rec]:
    """Finished jobs over the year (attempt + usage record each), running jobs on the nodes, pending ones."""
    from portal.jobs.models import Job, JobAttempt, ReplicaPlacement

    t0 = time.perf_counter()
    running = _running_slots(rng, nodes)
    pending = 500
    finished = jobs - len(running) - pending
    year_s = 365 * 86400
    shapes = ((1, 0, ""), (2, 0, ""), (4, 0, ""), (8, 0, ""), (0, 500, ""), (0, 250, ""))
    rows, meta = [], []
    for i in range(jobs):
        team_index = i % len(teams)
        gpu, milli, mig = rng.choice(shapes)
        if i < finished:
            created = now - timedelta(seconds=rng.randrange(3600, year_s))
            state = rng.choice(("Succeeded", "Succeeded", "Succeeded", "Failed", "Cancelled"))
        elif i < finished + len(running):
            node, devices, milli_held, mig = running[i - finished]
            gpu, milli = (len(devices), 0) if milli_held >= 1000 else (0, milli_held)
            created = now - timedelta(seconds=rng.randrange(600, 86400))
            state = "Running"
        else:
            created = now - timedelta(seconds=rng.randrange(60, 3 * 86400))
            state = "Pending"
        rows.append(
            Job(
                name=f"bench-{i}", owner=owner_of[teams[team_index].pk], team=teams[team_index],
                local_queue=queues[team_index], image="bench", priority_class=rng.choice(priorities), state=state,
                gpu=gpu, gpu_milli=milli, mig_profile=mig, cpu_milli=4000, memory_mib=16384, attempt=0,
            )
        )  # fmt: skip
        meta.append(created)
    created_jobs = Job.objects.bulk_create(rows, batch_size=5000)
    # created_at is auto_now_add: set the generated times afterwards, in one statement.
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.executemany(
            "UPDATE jobs_job SET created_at = %s WHERE id = %s",
            [(t, j.pk) for j, t in zip(created_jobs, meta, strict=True)],
        )
    attempts, placements, recs = [], [], []
    position = 0
    for index, (job, created) in enumerate(zip(created_jobs, meta, strict=True)):
        model = "T4" if index % 7 == 0 else "H100-80GB" if index % 3 == 0 else "A100-80GB"
        if job.state == "Pending":
            position += 1
            Job.objects.filter(pk=job.pk).update(
                queue_position=position,
                pending_reason={"kind": "quota", "message": f"needs {job.gpu or 1} {model} GPU, none free in quota"},
            )
            continue
        wait = timedelta(seconds=rng.expovariate(1 / 600))
        admitted = created + wait
        share = (job.gpu * 7000) if job.gpu else job.gpu_milli * 7
        if job.state == "Running":
            node, devices, milli_held, mig = running[index - finished]
            model = node.gpu_model.name
            placements.append(
                ReplicaPlacement(job=job, replica=0, node=node.name, gpu_indices=list(devices), gpu_milli=milli_held,
                                 mig_profile=mig, mig_slot=0 if mig else None, cpu_milli=4000, memory_mib=16384)
            )  # fmt: skip
            ended = None
        else:
            ended = min(now, admitted + timedelta(seconds=rng.randrange(300, 12 * 3600)))
        attempts.append(
            JobAttempt(job=job, number=1, queued_at=created, admitted_at=admitted, started_at=admitted, ended_at=ended,
                       outcome="" if ended is None else job.state, gpu_model=model, capacity_type="on-demand",
                       replicas=1, gpu_share_7000ths=share, cpu_milli=4000, memory_mib=16384)
        )  # fmt: skip
        if ended is not None and share:
            delta = ended - admitted
            micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
            recs.append(
                Rec(job.pk, job.team_id, "default", f"cq-{TEAMS[index % len(TEAMS)]}", model, "on-demand", admitted,
                    ended, share, micros, 4000 * micros, 16384 * micros, None)
            )  # fmt: skip
    JobAttempt.objects.bulk_create(attempts, batch_size=5000)
    ReplicaPlacement.objects.bulk_create(placements)
    Job.objects.filter(state="Running").update(attempt=1)
    for node in nodes:  # the GPU model each running job was admitted on: its node's
        Job.objects.filter(state="Running", placements__node=node.name).update(gpu_model=node.gpu_model)
    print(f"{len(created_jobs)} jobs ({len(running)} running, {pending} pending) in {time.perf_counter() - t0:.1f} s")
    return recs


def _running_slots(rng, nodes) -> list[tuple[Any, tuple[int, ...], int, str]]:
    """(node, devices, milli per device, MIG profile) for the running jobs: about 80 % of the GPUs held."""
    slots: list[tuple[Any, tuple[int, ...], int, str]] = []
    for node in nodes:
        if node.unschedulable:
            continue
        if node.mig_enabled:
            slots.extend((node, (d,), 0, "3g.40gb") for d in range(node.gpu_count))
            continue
        d = 0
        while d < node.gpu_count:
            kind = rng.random()
            if kind < 0.2:
                d += 1  # left free
            elif kind < 0.45:
                slots.append((node, (d,), 500, ""))
                if rng.random() < 0.5:
                    slots.append((node, (d,), 250, ""))
                d += 1
            elif kind < 0.75 or d + 1 >= node.gpu_count:
                slots.append((node, (d,), 1000, ""))
                d += 1
            else:
                slots.append((node, (d, d + 1), 1000, ""))
                d += 2
    return slots


def _samples(rng, *, days: int, now: datetime) -> None:
    """Queue samples every 5 minutes for ``days`` days, by COPY."""
    from django.db import connection, transaction

    t0 = time.perf_counter()
    steps = days * 288
    start = now - timedelta(days=days)
    count = 0
    with transaction.atomic(), connection.cursor() as cursor:
        columns = "at, cluster_queue, gpu_model, nominal_milli, used_milli, borrowed_milli, lent_milli, pending_milli"
        with cursor.cursor.copy(f"COPY ops_queuesample ({columns}) FROM STDIN") as copy:
            for step in range(steps):
                at = start + timedelta(minutes=5 * step)
                for slug in TEAMS:
                    for model, nominal in (("A100-80GB", 30000), ("H100-80GB", 14000), ("T4", 8000)):
                        used = rng.randrange(0, nominal + nominal // 2)
                        copy.write_row((at, f"cq-{slug}", model, nominal, used, max(0, used - nominal), 0,
                                        rng.randrange(0, nominal)))  # fmt: skip
                        count += 1
    print(f"{count} queue samples in {time.perf_counter() - t0:.1f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--sample-days", type=int, default=365)
    args = parser.parse_args()

    import django

    django.setup()
    ensure_database()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)

    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client

    from portal.jobs.models import Job

    now = datetime.now(UTC)
    if args.rebuild or Job.objects.count() != args.jobs:
        fill(jobs=args.jobs, sample_days=args.sample_days, now=now)
    users = get_user_model().objects
    clients = {}
    for role, name in (("admin", "bench-admin"), ("member", "bench-member")):
        clients[role] = Client()
        clients[role].force_login(users.get(username=name))
    print(f"{Job.objects.count()} jobs; {args.repeat} requests per page after one warm-up")
    load = os.getloadavg()[0]
    print(f"load average {load:.1f} on {os.cpu_count()} cores: wall times grow with it; CPU is this process's")
    header = f"{'page':<28} {'median ms':>10} {'worst ms':>9} {'CPU ms med':>11} {'queries':>8}"
    print(f"{header}  within {TARGET_MS:.0f} ms")
    worst_median = 0.0
    for name, url, role in PAGES:
        client = clients[role]
        queries: list[str] = []  # the warm-up request's SQL statements, counted

        def count(execute, sql, params, many, context, queries=queries):
            queries.append(sql)
            return execute(sql, params, many, context)

        with connection.execute_wrapper(count):
            response = client.get(url, secure=True)
        if response.status_code != 200:
            sys.exit(f"{name}: {url} answered {response.status_code}")
        timings, cpu = [], []
        for _ in range(args.repeat):
            c0 = time.process_time()
            t0 = time.perf_counter()
            response = client.get(url, secure=True)
            timings.append((time.perf_counter() - t0) * 1000)
            cpu.append((time.process_time() - c0) * 1000)
            assert response.status_code == 200
        median = statistics.median(timings)
        worst_median = max(worst_median, median)
        print(
            f"{name:<28} {median:>10.1f} {max(timings):>9.1f} {statistics.median(cpu):>11.1f} "
            f"{len(queries):>8}  {'yes' if median <= TARGET_MS else 'NO'}"
        )
    print(f"slowest median: {worst_median:.1f} ms (target {TARGET_MS:.0f} ms)")


if __name__ == "__main__":
    main()
