"""Benchmark the dry run through the API: ``POST /api/v1/jobs/check/`` with Django's test client on
PostgreSQL, beside the scheduling cycle over the same rows.

    DATABASE_URL=postgres://... .venv/bin/python bench/bench_dryrun_api.py [--nodes 500] [--jobs 4000]
                                                                             [--checks 100]

Creates a scratch database (``bench_dryrun_`` + the database's name, dropped after), simulated nodes of 8
A100s in two teams' queues, and ``--jobs`` pending jobs of 1, 2, 4 and 8 GPUs; one scheduling cycle
(``cycle_run``: sync, snapshot, engine, plan written) admits what fits. Then it prints the wall and
CPU time of:

- the first check (no kept state: the request builds it, one cycle over a fresh snapshot);
- ``--checks`` checks of varied requests on the kept state (P50/P95/max): validation, the engine's
  answer and suggestions, pricing, the queries (the state rebuilt behind them once its TTL is over);
  each request of its own shape (memory varies), so no answer kept per shape serves it;
- checks right after another cycle with the state rebuilt behind the requests
  (``DRY_RUN_REFRESH_BEHIND``), answered from the kept state meanwhile.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

DEFAULTS = {"nodes": 500, "jobs": 4000, "checks": 100, "seed": 1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, default in DEFAULTS.items():
        parser.add_argument(f"--{name}", type=int, default=default)
    args = parser.parse_args()

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.db import connection
    from django.test.utils import setup_test_environment

    setup_test_environment()
    settings.CLUSTER_BACKEND = "simulated"
    settings.DRY_RUN_REFRESH_BEHIND = False
    # A name of its own: not the test suite's test database, which may be in use.
    settings.DATABASES["default"]["TEST"]["NAME"] = f"bench_dryrun_{settings.DATABASES['default']['NAME']}"
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        run(args)
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)


def timed(call):  # type: ignore[no-untyped-def]
    wall, cpu = time.perf_counter(), time.process_time()
    result = call()
    return result, (time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000


def run(args: argparse.Namespace) -> None:
    from django.conf import settings
    from django.db.models import Count
    from django.test import Client

    from bench.world import jobs_bulk, world_build
    from billing.services import price_book_seed_defaults
    from portal.jobs.models import Job
    from scheduling.dry_run import dry_run_forget
    from scheduling.services import cycle_run

    rng = random.Random(args.seed)
    teams = ("vision", "nlp")
    world = world_build(teams=teams, nodes=args.nodes)
    price_book_seed_defaults()
    for k, team in enumerate(teams):
        for gpu in (1, 2, 4, 8):
            jobs_bulk(world, team, args.jobs // 8 + (k == 0 and gpu == 1) * (args.jobs % 8), gpu=gpu, runtime_s=3600)
    _, cycle_ms, cycle_cpu = timed(cycle_run)
    states = dict(Job.objects.values_list("state").annotate(n=Count("id")).order_by())
    print(f"world: {args.nodes} nodes x 8 A100, jobs by state {states}")
    print(f"scheduling cycle (cycle_run: sync, snapshot, engine, plan): {cycle_ms:.0f} ms wall, {cycle_cpu:.0f} ms CPU")

    client = Client(HTTP_AUTHORIZATION=f"Token {world.tokens['vision']}")

    def body() -> dict[str, object]:
        gpu = rng.choice((1, 2, 4, 8))
        return {
            "queue": "default",
            "image": "nvcr.io/nvidia/pytorch:24.08-py3",
            "gpu": gpu,
            "replicas": rng.choice((1, 1, 1, 2)),
            "cpu_milli": 4000 * gpu,
            "memory_mib": 16384 * gpu + rng.randrange(1024),  # a shape of its own: no answer kept for it
            "runtime_s": rng.choice((600, 3600, 7200)),
            "allowed_gpu_models": ["A100-80GB"],
        }

    def check() -> dict[str, object]:
        answer = client.post("/api/v1/jobs/check/", body(), content_type="application/json")
        assert answer.status_code == 200, answer.content
        return answer.json()

    dry_run_forget()
    _, first_ms, first_cpu = timed(check)
    print(f"first check (builds the kept state in the request): {first_ms:.0f} ms wall, {first_cpu:.0f} ms CPU")
    report("checks on the kept state", [timed(check) for _ in range(args.checks)])
    settings.DRY_RUN_REFRESH_BEHIND = True
    cycle_run()
    report("checks after another cycle, rebuilt behind them", [timed(check) for _ in range(args.checks // 4)])


def report(what: str, runs: list[tuple[dict[str, object], float, float]]) -> None:
    wall = np.array([r[1] for r in runs])
    cpu = np.array([r[2] for r in runs])
    verdicts: dict[str, int] = {}
    for answer, _, _ in runs:
        verdicts[str(answer["verdict"])] = verdicts.get(str(answer["verdict"]), 0) + 1
    w50, w95 = np.percentile(wall, [50, 95])
    c50, c95 = np.percentile(cpu, [50, 95])
    print(
        f"{what}: {len(runs)}, wall P50 {w50:.1f} ms, P95 {w95:.1f} ms, max {wall.max():.1f} ms; "
        f"CPU P50 {c50:.1f} ms, P95 {c95:.1f} ms  {verdicts}"
    )


if __name__ == "__main__":
    main()
