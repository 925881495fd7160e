"""Hostile-tenant benchmark: one team's largest legal jobs do not slow another team's admissions.

Usage: ``python bench/bench_hostile.py [--hostile-jobs 50] [--rounds 30]`` (its own PostgreSQL).

Team nlp submits a job through the API and a scheduling cycle runs; the time from the request to
the job's admission is one sample (``--rounds`` samples, median). Team vision has
``--hostile-jobs`` pending jobs that match no node (so every cycle reconsiders them): first the
smallest spec (one node-selector entry), then as many jobs of the largest spec the API accepts (16
tolerations, 32 labels, 16 node-selector entries, 256 command arguments of 128 characters, a node
affinity of 8 terms of 8 expressions of 16 values and as many preferred terms, 4 anti-affinity terms,
4 spread constraints, one-rack gangs; the affinity's values differ from job to job, so the cycle
cannot share one job's work with the next). Vision
also tries the 40,000-toleration body of the adversarial test (refused: its answer time is printed).
The quiet cluster (no vision jobs) is printed for reference.

Target: the size of vision's jobs changes nlp's median submit-to-admit by less than 10 % (how many
jobs a team may queue is bounded apart: a local queue's ``max_pending_jobs`` and the API throttles).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.stack import Stack, django_against, free_port

TARGET_RATIO = 1.10


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hostile-jobs", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    with Stack("hostile") as stack:
        env = stack.environment(
            DATABASE_URL=stack.start_postgres(free_port()), SECRET_KEY="bench-only-secret-key-0123456789abcdefghijkl",
            SECURE_SSL_REDIRECT="0", REDIS_URL="", CELERY_TASK_ALWAYS_EAGER="1", API_THROTTLE_ENABLED="0",
            LOG_LEVEL="WARNING", ALLOWED_HOSTS="testserver",
            QUEUE_NEVER_FITTING_JOBS="1",  # vision's jobs match no node and must queue (an autoscaling cluster)
        )  # fmt: skip
        stack.manage("migrate", "--noinput")
        with django_against(env):
            from django.test.utils import setup_test_environment
            from django.utils import timezone
            from rest_framework.test import APIClient

            from bench.world import world_build
            from portal.jobs.models import Job
            from portal.jobs.services import MAX_COMMAND_ARGS, MAX_LABELS, MAX_NODE_SELECTOR, MAX_TOLERATIONS
            from portal.tenants.models import Team, TolerationGrant
            from scheduling.adapters.k8s import affinity as rules
            from scheduling.adapters.simulated import SimulatedCluster
            from scheduling.services import cycle_run

            setup_test_environment()
            world = world_build(nodes=64, members=1)
            clients = {}
            for team in ("vision", "nlp"):
                clients[team] = APIClient()
                clients[team].credentials(HTTP_AUTHORIZATION=f"Token {world.tokens[team]}")
            backend = SimulatedCluster(speedup=1.0)

            def submit_to_admit() -> float:
                started = time.perf_counter()
                response = clients["nlp"].post(
                    "/api/v1/jobs/", {"queue": "default", "image": "pytorch:2.4", "gpu": 1}, format="json"
                )
                assert response.status_code == 201, response.content
                cycle_run(now=timezone.now(), backend=backend)
                elapsed = time.perf_counter() - started
                assert Job.objects.get(pk=response.json()["id"]).state in ("Admitted", "Running")
                return elapsed

            def median_ms() -> float:
                submit_to_admit()  # warm-up
                return statistics.median(submit_to_admit() for _ in range(args.rounds)) * 1000

            quiet = median_ms()
            vision = Team.objects.get(slug="vision")
            TolerationGrant.objects.create(team=vision, all_taints=True)
            small = {"queue": "default", "image": "pytorch:2.4", "gpu": 1, "node_selector": {"pool": "none"}}
            hostile = {
                "queue": "default", "image": "pytorch:2.4", "gpu": 1,
                "tolerations": [{"key": f"k{i}.example.com/t", "operator": "Exists"} for i in range(MAX_TOLERATIONS)],
                "labels": {f"l{i}": "x" * 63 for i in range(MAX_LABELS)},
                "node_selector": {f"pool{i}": "none" for i in range(MAX_NODE_SELECTOR)},
                "command": ["x" * 128] * MAX_COMMAND_ARGS,
            }  # fmt: skip

            def largest_rules(job: int) -> dict:
                def term(t: int) -> dict:
                    values = [f"v{job}-{t}-{v}" for v in range(rules.MAX_VALUES)]
                    expression = [
                        {"key": f"k{e}", "operator": "In", "values": values} for e in range(rules.MAX_REQUIREMENTS)
                    ]
                    return {"matchExpressions": expression}

                req, pref = (
                    "requiredDuringSchedulingIgnoredDuringExecution",
                    "preferredDuringSchedulingIgnoredDuringExecution",
                )
                keys = [f"topology.example.com/l{i}" for i in range(rules.MAX_SPREAD_CONSTRAINTS)]
                return {
                    "affinity": {
                        "nodeAffinity": {
                            req: {"nodeSelectorTerms": [term(t) for t in range(rules.MAX_TERMS)]},
                            pref: [{"weight": 100, "preference": term(t)} for t in range(rules.MAX_TERMS)],
                        },
                        "podAntiAffinity": {req: [{"topologyKey": k} for k in keys[: rules.MAX_ANTI_AFFINITY_TERMS]]},
                    },
                    "topology_spread_constraints": [
                        {"maxSkew": 1, "topologyKey": k, "whenUnsatisfiable": "DoNotSchedule", "minDomains": 3}
                        for k in keys
                    ],
                    "required_topology": "rack",
                }

            sets: dict[str, list[int]] = {"small": [], "largest": []}
            for name, body in (("small", small), ("largest", hostile)):
                for index in range(args.hostile_jobs):
                    payload = {**body, **largest_rules(index)} if name == "largest" else body
                    response = clients["vision"].post("/api/v1/jobs/", payload, format="json")
                    assert response.status_code == 201, response.content[:300]
                    sets[name].append(response.json()["id"])
            huge = json.dumps({**hostile, "tolerations": [{"key": "spot", "operator": "Exists"}] * 40_000})
            started = time.perf_counter()
            refused = clients["vision"].post("/api/v1/jobs/", data=huge, content_type="application/json")
            refused_ms = (time.perf_counter() - started) * 1000
            # The two sets take turns being the pending ones (the other parked out of the cycle's sight),
            # sample by sample, so the machine's drift affects both alike.
            samples: dict[str, list[float]] = {"small": [], "largest": []}
            for _ in range(args.rounds):
                for name in ("small", "largest"):
                    other = "largest" if name == "small" else "small"
                    Job.objects.filter(pk__in=sets[other]).update(state="Cancelled")
                    Job.objects.filter(pk__in=sets[name]).update(state="Pending")
                    samples[name].append(submit_to_admit() * 1000)
            small_ms = statistics.median(samples["small"])
            loaded = statistics.median(samples["largest"])
    ratio = loaded / small_ms
    print(f"nlp submit-to-admit, median of {args.rounds}: quiet cluster {quiet:.1f} ms")
    print(f"  with {args.hostile_jobs} of vision's smallest jobs pending: {small_ms:.1f} ms")
    print(f"  with {args.hostile_jobs} of vision's largest legal jobs pending: {loaded:.1f} ms ({ratio - 1:+.1%})")
    print(f"  vision's 40,000-toleration body ({len(huge) / 1e6:.1f} MB): {refused.status_code} in {refused_ms:.0f} ms")
    met = ratio < TARGET_RATIO and refused.status_code in (400, 413)
    print(f"target < {TARGET_RATIO - 1:.0%} change: {'met' if met else 'NOT met'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
