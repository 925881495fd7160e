"""``python manage.py seed_demo``: a small simulated cluster, two teams, users, queues and sample jobs.

Idempotent: configuration rows are created or updated in place; sample jobs are only created when the
database has no jobs yet, so running it twice changes nothing the second time.
"""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from portal.jobs.models import ClusterQueue, FlavorQuota, GpuModel, Job, LocalQueue, PriorityClass
from portal.jobs.services import MAX_RUNTIME_S, JobSpec, job_submit
from portal.jobs.states import JobState
from portal.jobs.transitions import job_transition
from portal.tenants.models import Membership, Team, TolerationGrant
from scheduling.models import NodePool, SimNode
from scheduling.selectors import runtime_speedup

MIG_PROFILES_80GB = ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]
GPU_MODELS = [
    ("H100-80GB", 80, MIG_PROFILES_80GB),
    ("A100-80GB", 80, MIG_PROFILES_80GB),
    ("A10", 24, []),
    ("T4", 16, []),
]
# (name prefix, model, count of nodes, GPUs per node, CPU cores, memory GiB, pool, capacity type, extra)
NODE_GROUPS: list[tuple[str, str, int, int, int, int, str, str, dict[str, Any]]] = [
    ("h100", "H100-80GB", 2, 8, 192, 2048, "training", "on-demand", {}),
    ("a100", "A100-80GB", 3, 8, 128, 1024, "training", "on-demand", {}),
    ("a100-spot", "A100-80GB", 1, 8, 128, 1024, "training", "spot", {"taint": "spot"}),
    ("a100-mig", "A100-80GB", 1, 4, 64, 512, "inference", "reserved", {"mig": True}),
    ("a10", "A10", 3, 4, 48, 192, "inference", "on-demand", {}),
    ("t4", "T4", 3, 4, 32, 128, "inference", "spot", {}),
]
PRIORITIES = [
    ("low", 100, True, "Best effort; first to be preempted"),
    ("default", 500, True, "Default for submitted jobs"),
    ("high", 1000, True, "Deadlines"),
    ("critical", 10000, False, "Production inference; never preempted"),
]
# Node pools (KAI/Run:ai's): name -> (node selector, placement, fractional overcommit, about).
POOLS = {
    "training": ({"portal.io/pool": "training"}, "binpack", "1.00", "Big training gangs: fill nodes, keep them whole"),
    "inference": ({"portal.io/pool": "inference"}, "spread", "1.25", "Serving and notebooks: spread, share GPUs"),
}
SEED_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["A100-80GB", "H100-80GB"]}
                    ]
                }
            ]
        }
    }
}
QUOTAS = {
    "cq-vision": {
        "H100-80GB": (8, 8, None),
        "A100-80GB": (16, 8, 8),
        "A10": (4, 4, None),
        "T4": (6, 6, None),
    },
    "cq-nlp": {"H100-80GB": (8, 8, None), "A100-80GB": (16, 8, 8), "A10": (8, 4, None), "T4": (6, 6, None)},
}


class Command(BaseCommand):
    help = "Load demo data: simulated cluster, teams vision and nlp, users alice/bob/admin (password demo)."

    def handle(self, *args, **options):
        with transaction.atomic():
            models = self.seed_catalogue()
            self.seed_nodes(models)
            self.seed_pools()
            teams, users = self.seed_tenants()
            queues = self.seed_queues(models, teams)
            self.seed_budgets(teams)
            created = self.seed_jobs(teams, users, queues, models) if not Job.objects.exists() else 0
            created += self.seed_workloads(teams, users, queues, models)
        from billing.services import budget_check, capacity_record, metering_run, price_book_seed_defaults
        from scheduling.services import cycle_run

        price_book_seed_defaults()
        # Capacity from before the first seeded job, so idle cost covers the whole demo history.
        capacity_record(now=timezone.now() - timedelta(days=8))
        cycle_run()
        metered = metering_run()
        budget_check()
        self.stdout.write(
            f"demo data ready: {SimNode.objects.count()} nodes, {Team.objects.count()} teams, "
            f"{created} sample jobs created, {metered} usage records metered"
        )

    def seed_catalogue(self) -> dict[str, GpuModel]:
        models = {}
        for name, memory, mig in GPU_MODELS:
            models[name], _ = GpuModel.objects.update_or_create(
                name=name, defaults={"memory_gib": memory, "mig_profiles": mig}
            )
        for name, value, preemptible, description in PRIORITIES:
            PriorityClass.objects.update_or_create(
                name=name, defaults={"value": value, "preemptible": preemptible, "description": description}
            )
        return models

    def seed_nodes(self, models: dict[str, GpuModel]) -> None:
        for prefix, model, count, gpus, cores, memory_gib, pool, capacity, extra in NODE_GROUPS:
            for i in range(count):
                SimNode.objects.update_or_create(
                    name=f"{prefix}-{i}",
                    defaults={
                        "gpu_model": models[model],
                        "gpu_count": gpus,
                        "cpu_milli": cores * 1000,
                        "memory_mib": memory_gib * 1024,
                        "labels": {
                            "portal.io/pool": pool,
                            "karpenter.sh/capacity-type": capacity,
                            "topology.kubernetes.io/zone": f"zone-{'ab'[i % 2]}",
                            "topology.kubernetes.io/rack": f"rack-{prefix}-{i // 2}",
                            "nvidia.com/gpu.product": model,
                        },
                        "taints": [{"key": "spot", "value": "true", "effect": "NoSchedule"}]
                        if extra.get("taint")
                        else [],
                        "mig_enabled": bool(extra.get("mig")),
                    },
                )
        SimNode.objects.update_or_create(
            name="cpu-0",
            defaults={"gpu_model": None, "gpu_count": 0, "cpu_milli": 64000, "memory_mib": 256 * 1024,
                      "labels": {"portal.io/pool": "cpu"}},
        )  # fmt: skip

    def seed_pools(self) -> None:
        for order, (name, (selector, placement, ratio, about)) in enumerate(POOLS.items()):
            NodePool.objects.update_or_create(
                name=name,
                defaults={
                    "node_selector": selector,
                    "placement": placement,
                    "overcommit_ratio": Decimal(ratio),
                    "order": order,
                    "description": about,
                },
            )

    def seed_tenants(self):
        User = get_user_model()
        users = {}
        for username, staff in (("alice", False), ("bob", False), ("admin", True)):
            user, created = User.objects.get_or_create(
                username=username,
                defaults={"is_staff": staff, "is_superuser": staff, "email": f"{username}@example.com"},
            )
            if created:
                user.set_password("demo")
                user.save()
            users[username] = user
        teams = {}
        for slug, name in (("vision", "Vision"), ("nlp", "NLP")):
            teams[slug], _ = Team.objects.update_or_create(
                slug=slug, defaults={"name": name, "namespace": f"team-{slug}"}
            )
        Membership.objects.update_or_create(
            user=users["alice"], team=teams["vision"], defaults={"role": Membership.Role.TEAM_ADMIN}
        )
        Membership.objects.update_or_create(
            user=users["bob"], team=teams["nlp"], defaults={"role": Membership.Role.TEAM_ADMIN}
        )
        # Both teams may use the spot node (its taint spot=true:NoSchedule); nothing else is granted.
        for team in teams.values():
            TolerationGrant.objects.get_or_create(team=team, key="spot", defaults={"note": "the demo's spot pool"})
        return teams, users

    def seed_queues(self, models, teams):
        queues = {}
        for cq_name, flavors in QUOTAS.items():
            cq, _ = ClusterQueue.objects.update_or_create(
                name=cq_name,
                defaults={"cohort": "research", "cpu_quota_milli": 400_000, "memory_quota_mib": 4 * 1024**2},
            )
            for order, (model, (nominal, borrow, lend)) in enumerate(flavors.items()):
                FlavorQuota.objects.update_or_create(
                    cluster_queue=cq,
                    gpu_model=models[model],
                    defaults={
                        "nominal_gpus": nominal,
                        "borrowing_limit": borrow,
                        "lending_limit": lend,
                        "order": order,
                    },
                )
            team = teams[cq_name.removeprefix("cq-")]
            queues[team.slug], _ = LocalQueue.objects.update_or_create(
                team=team, name="default", defaults={"cluster_queue": cq, "max_pending_jobs": 200}
            )
        return queues

    def seed_budgets(self, teams) -> None:
        from billing.models import Budget

        # vision: roomy; nlp: tight enough that the demo shows budget alerts (no hard stop).
        Budget.objects.get_or_create(team=teams["vision"], defaults={"monthly_gpu_usd": Decimal("20000")})
        Budget.objects.get_or_create(team=teams["nlp"], defaults={"monthly_gpu_usd": Decimal("3000")})

    def seed_jobs(self, teams, users, queues, models) -> int:
        """A week of finished history (for charts and bills), then live jobs the scheduler will place."""
        priorities = {p.name: p for p in PriorityClass.objects.all()}
        owners = {"vision": users["alice"], "nlp": users["bob"]}
        count = self.seed_history(teams, owners, queues, models, priorities)
        return count + self.seed_live(teams, owners, queues, models, priorities)

    def seed_history(self, teams, owners, queues, models, priorities) -> int:
        """Jobs of the last seven days, scheduled by the engine: submitted at their times, then replayed
        through the cycle (``history_replay``), so what the pages and the what-if show of this history is
        what the scheduler would have done (a replay with today's settings gives it back)."""
        rng = random.Random(7)
        now = timezone.now()
        speedup = runtime_speedup()
        ran: dict[str, tuple[float, str]] = {}  # job id -> (seconds its pods ran, how it ended)
        shapes: list[dict[str, Any]] = [
            {"gpu": 1}, {"gpu": 2}, {"gpu": 4}, {"gpu_milli": 500}, {"gpu_milli": 250}, {"mig_profile": "3g.40gb"},
        ]  # fmt: skip

        def submit(slug: str, shape: dict[str, Any], model: str, submitted, runtime: int) -> None:
            # ``runtime``: what the job runs, in the cluster's seconds. What it asks for: the simulated
            # cluster runs a job of runtime_s in runtime_s / speedup seconds, live jobs as the history
            # did, so the start estimates learn from the history what the live jobs then do (a history
            # ending at 60-100 % of the request made every estimate of the demo early by a fifth).
            requested = min(MAX_RUNTIME_S, round(runtime * speedup))
            job = job_submit(
                owner=owners[slug],
                spec=JobSpec(
                    team=teams[slug],
                    local_queue=queues[slug],
                    image="nvcr.io/nvidia/pytorch:24.08-py3",
                    priority_class=priorities["default"],
                    name=f"{slug}-history-{len(ran)}",
                    command=("python", "train.py"),
                    runtime_s=requested,
                    cpu_milli=4000,
                    memory_mib=16384,
                    allowed_gpu_models=(models[model],),
                    **shape,
                ),
                at=submitted,
                request_cycle=False,
            )
            outcome = rng.random()
            if outcome < 0.08:
                ran[str(job.pk)] = (runtime / 3, JobState.FAILED)
            elif outcome < 0.14:
                ran[str(job.pk)] = (runtime / 2, JobState.CANCELLED)
            else:
                ran[str(job.pk)] = (float(runtime), JobState.SUCCEEDED)

        for day in range(7, 0, -1):
            for slug in ("vision", "nlp"):
                for _ in range(rng.randint(3, 6)):
                    shape = rng.choice(shapes)
                    model = (
                        "A100-80GB" if "mig_profile" in shape else rng.choice(["H100-80GB", "A100-80GB", "A10", "T4"])
                    )
                    submit(
                        slug,
                        shape,
                        model,
                        now - timedelta(days=day, hours=rng.uniform(0, 20)),
                        rng.randint(1, 6) * 1800,
                    )
            # A daily burst of whole-node training runs, more than the team's quota of the model holds at
            # once: the last ones wait for the first to end (real waits for the queue and what-if pages).
            slug, model, count = ("nlp", "H100-80GB", 3) if day % 2 else ("vision", "A100-80GB", 4)
            burst = now - timedelta(days=day, hours=rng.uniform(2, 16))
            for k in range(count):
                submit(slug, {"gpu": 8}, model, burst + timedelta(seconds=20 * k), rng.randint(3, 6) * 1800)
        history_replay(now, ran)
        return len(ran)

    def seed_live(self, teams, owners, queues, models, priorities) -> int:
        """Live jobs: the scheduler admits what fits; the rest waits with a reason and an estimated start."""
        count = 0
        live: list[tuple[str, str, dict[str, Any], str, int, list[str]]] = [
            (
                "vision",
                "resnet-sweep",
                {
                    "gpu": 1,
                    "replicas": 4,
                    "affinity": SEED_AFFINITY,
                    "topology_spread_constraints": (
                        {
                            "maxSkew": 1,
                            "topologyKey": "topology.kubernetes.io/zone",
                            "whenUnsatisfiable": "ScheduleAnyway",
                        },
                    ),
                },
                "default",
                4 * 3600,
                [],
            ),
            ("vision", "detector-finetune", {"gpu": 8}, "high", 8 * 3600, ["H100-80GB"]),
            ("vision", "notebook-share", {"gpu_milli": 250}, "low", 2 * 3600, ["T4"]),
            # A distributed training gang: it waits for H100 capacity and says how many nodes would start it.
            (
                "vision",
                "big-gang",
                {"kind": "training", "gpu": 8, "replicas": 2, "checkpoint_path": "s3://vision-ckpt/big-gang"},
                "default",
                12 * 3600,
                ["H100-80GB"],
            ),
            # Opted in to spot capacity (the tainted a100-spot node, at the spot price).
            (
                "vision",
                "augment-spot",
                {"gpu": 4, "spot": True, "checkpoint_path": "s3://vision-ckpt/augment"},
                "low",
                6 * 3600,
                ["A100-80GB"],
            ),
            (
                "nlp",
                "llama-70b-serve",
                {"gpu_memory_gib": 140},
                "critical",
                24 * 3600,
                ["A100-80GB", "H100-80GB"],
            ),
            ("nlp", "bert-eval", {"mig_profile": "1g.10gb"}, "default", 3600, ["A100-80GB"]),
            (
                "nlp",
                "pretrain",
                {
                    "kind": "training",
                    "gpu": 8,
                    "replicas": 2,
                    "required_topology": "rack",
                    "checkpoint_path": "s3://nlp-ckpt/pretrain",
                    "max_restarts": 2,
                },
                "default",
                24 * 3600,
                ["A100-80GB"],
            ),
            ("nlp", "tokenize", {"gpu": 0}, "low", 1800, []),
            # A Ray job: a CPU head and a group of GPU workers, admitted as one gang (a KubeRay RayJob).
            (
                "nlp",
                "ray-tune",
                {
                    "kind": "ray",
                    "gpu": 0,
                    "ray": {
                        "mode": "job",
                        "entrypoint": "python tune.py --trials 32",
                        "worker_groups": [
                            {"name": "gpu", "replicas": 2, "gpu": 2, "cpu_milli": 16000, "memory_mib": 131072}
                        ],
                    },
                },
                "default",
                3 * 3600,
                ["A100-80GB"],
            ),
        ]
        for slug, name, shape, priority, runtime, allowed in live:
            job_submit(
                owner=owners[slug],
                spec=JobSpec(
                    team=teams[slug],
                    local_queue=queues[slug],
                    image="nvcr.io/nvidia/pytorch:24.08-py3",
                    priority_class=priorities[priority],
                    name=name,
                    command=("python", f"{name}.py"),
                    runtime_s=runtime,
                    cpu_milli=8000,
                    memory_mib=65536,
                    allowed_gpu_models=tuple(models[m] for m in allowed),
                    **shape,
                ),
            )
            count += 1
        return count

    def seed_workloads(self, teams, users, queues, models) -> int:
        """The workloads of issue 13 once each: an off-peak job, a job that starts after a time, a
        nightly schedule (cron in Berlin time) and a 13B chat service the autoscaler scales."""
        from portal.api.job_create import job_spec_from_body
        from portal.schedules.models import JobSchedule
        from portal.schedules.services import schedule_create
        from portal.serving.models import InferenceService
        from portal.serving.services import ServiceSpec, service_create

        count = 0
        priorities = {p.name: p for p in PriorityClass.objects.all()}
        image = "nvcr.io/nvidia/pytorch:24.08-py3"
        if not Job.objects.filter(name="nightly-eval").exists():
            for name, extra in (
                ("nightly-eval", {"off_peak": True}),
                ("after-release", {"start_after": timezone.now() + timedelta(hours=6)}),
            ):
                job_submit(
                    owner=users["alice"],
                    spec=JobSpec(
                        team=teams["vision"],
                        local_queue=queues["vision"],
                        image=image,
                        priority_class=priorities["low"],
                        name=name,
                        command=("python", f"{name}.py"),
                        gpu=2,
                        runtime_s=2 * 3600,
                        allowed_gpu_models=(models["A100-80GB"],),
                        **extra,
                    ),
                )
                count += 1
        if not JobSchedule.objects.filter(name="nightly-finetune").exists():
            schedule_create(
                owner=users["bob"],
                name="nightly-finetune",
                cron="0 2 * * *",
                zone="Europe/Berlin",
                job={
                    "team": "nlp",
                    "queue": queues["nlp"].name,
                    "image": image,
                    "gpu": 4,
                    "runtime_s": 3 * 3600,
                    "off_peak": True,
                    "command": "python finetune.py",
                },
                spec_of=job_spec_from_body,
            )
        if not InferenceService.objects.filter(name="llama-13b-chat").exists():
            service_create(
                owner=users["bob"],
                spec=ServiceSpec(
                    name="llama-13b-chat",
                    local_queue=queues["nlp"],
                    priority_class=priorities["high"],
                    image="vllm/vllm-openai:v0.6.0",
                    command=("vllm", "serve", "meta-llama/Llama-2-13b-chat-hf"),
                    model_family="llama",
                    model_size_b=13,
                    min_replicas=1,
                    max_replicas=3,
                    metric="rps",
                    target_per_replica=20.0,
                    allowed_gpu_models=(models["A100-80GB"], models["H100-80GB"]),
                ),
            )
            count += 1
        return count


# How a seeded job's run ends (a cancelled one: by its owner).
ENDINGS: dict[str, tuple[str, str]] = {
    JobState.FAILED: ("cluster", "container exited with code 1"),
    JobState.SUCCEEDED: ("cluster", "completed"),
}


def history_replay(now, ran: dict[str, tuple[float, str]]) -> None:
    """Schedule the submitted history with the engine and write what it decided.

    The jobs of ``ran`` (id -> seconds its pods ran, final state) are replayed from their submissions to
    ``now`` by the what-if's replay (``scheduling.sim.history``: the cycle's own code at every arrival
    and end) on today's nodes and queues; each attempt is then written as the scheduler writes one
    (``admission_apply``, ``preemption_apply``), its pods running from admission (as the simulated
    cluster reports them) and ending after their run time. A job the replay leaves running or waiting
    at ``now`` is cancelled."""
    from scheduling.adapters.apply import admission_apply, preemption_apply
    from scheduling.adapters.contract import Observation, node_capacity_type
    from scheduling.adapters.factory import cluster_backend
    from scheduling.adapters.history import base_snapshot_load, history_load
    from scheduling.engine import model as m
    from scheduling.selectors import policy_from_settings, replay_timing_from_settings
    from scheduling.services import observations_apply
    from scheduling.sim.history import COMPLETED, PREEMPTED, replay_history

    jobs = {str(job.pk): job for job in Job.objects.filter(pk__in=[int(i) for i in ran]).select_related("owner")}
    start = min(job.created_at for job in jobs.values())
    history = history_load(start=start, end=now)
    replay_jobs = [replace(h, run_s=ran[h.workload.id][0]) for h in history.jobs]
    backend = cluster_backend()
    base = base_snapshot_load(backend=backend)
    run = replay_history(
        base,
        replay_jobs,
        policy_from_settings(),
        start_s=start.timestamp(),
        end_s=now.timestamp(),
        node_capacity_types={node.name: node_capacity_type(node) for node in base.nodes},
        **replay_timing_from_settings(),
    )
    nodes = {node.name: node for node in base.nodes}
    gpu_models = {g.name: g for g in GpuModel.objects.all()}

    def moment(seconds: float):
        return datetime.fromtimestamp(seconds, tz=UTC)

    for attempt in run.attempts:  # in admission order
        job = jobs[attempt.job_id]
        admitted = moment(attempt.admitted_s)
        admission = m.Admission(attempt.job_id, attempt.gpu_model or None, attempt.placements, attempt.borrowed)
        admission_apply(admission, now=admitted, nodes=nodes, gpu_models=gpu_models)
        job.refresh_from_db()
        # The pods run from admission, as the simulated cluster reports them (its observation, applied as
        # every cluster report is: the running transition carries the admission's detail for metering).
        observations_apply([Observation(job.pk, job.attempt, JobState.RUNNING, admitted, "pods running")])
        job.refresh_from_db()
        if attempt.outcome == PREEMPTED:
            preemption = m.Preemption(attempt.job_id, "", attempt.reason)
            preemption_apply(preemption, now=moment(attempt.ended_s or attempt.admitted_s), backend=backend)
        elif attempt.outcome == COMPLETED and attempt.ended_s is not None:
            final = ran[attempt.job_id][1]
            actor, reason = (job.owner.username, "cancelled") if final == JobState.CANCELLED else ENDINGS[final]
            job_transition(job=job, to_state=final, at=moment(attempt.ended_s), reason=reason, actor=actor)
        else:  # still running at ``now``
            job_transition(job=job, to_state=JobState.CANCELLED, at=now, reason="cancelled", actor=job.owner.username)
    for job_id, _, _ in run.waiting:
        job = Job.objects.get(pk=int(job_id))
        job_transition(job=job, to_state=JobState.CANCELLED, at=now, reason="cancelled", actor=job.owner.username)
