"""The jobs app's management commands: ``seed_demo``, ``issue_token`` and the demo loop (``rundemo``)."""

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from rest_framework.test import APIClient

from portal.jobs.models import Job
from scheduling.models import NodePool, SimNode

pytestmark = pytest.mark.django_db


def test_seed_demo_loads_the_demo_and_a_second_run_changes_nothing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    call_command("seed_demo", stdout=StringIO())
    models = set(SimNode.objects.exclude(gpu_model=None).values_list("gpu_model__name", flat=True))
    assert models == {"H100-80GB", "A100-80GB", "A10", "T4"}
    states = set(Job.objects.values_list("state", flat=True))
    assert {"Succeeded", "Admitted", "Pending"} <= states
    assert {"batch", "training"} <= set(Job.objects.values_list("kind", flat=True))
    spot = Job.objects.get(name="augment-spot")
    assert (spot.state, spot.capacity_type) == ("Admitted", "spot")  # on the tainted spot node
    # A 2 x 8-GPU gang that must stay in one rack of two A100 nodes, one of them partly busy: two
    # new A100 nodes of the training pool (a rack of their own) would let it start.
    gang = Job.objects.get(name="pretrain")
    details = gang.pending_reason["details"]
    assert (details["provision_pool"], details["provision_gpu_model"], details["provision_nodes"]) == (
        "training",
        "A100-80GB",
        2,
    )
    before = (sorted(Job.objects.values_list("id", flat=True)), sorted(SimNode.objects.values_list("name", flat=True)))
    out = StringIO()
    call_command("seed_demo", stdout=out)
    assert "0 sample jobs created" in out.getvalue()
    after = (sorted(Job.objects.values_list("id", flat=True)), sorted(SimNode.objects.values_list("name", flat=True)))
    assert after == before
    client = APIClient()
    assert client.login(username="alice", password="demo")
    assert client.get("/api/v1/jobs/?team=vision").json()["count"] > 0


def test_issue_token_prints_a_working_token_once_and_rotate_revokes_the_old_one(world):
    out = StringIO()
    call_command("issue_token", "alice", stdout=out)
    token = out.getvalue().strip()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.get("/api/v1/jobs/").status_code == 200
    again = StringIO()
    call_command("issue_token", "alice", "--rotate", stdout=again)
    rotated = again.getvalue().strip()
    assert rotated != token  # only hashes are stored: a key cannot be printed twice
    assert client.get("/api/v1/jobs/").status_code == 401
    client.credentials(HTTP_AUTHORIZATION=f"Token {rotated}")
    assert client.get("/api/v1/jobs/").status_code == 200
    with pytest.raises(CommandError, match="no user named 'mallory'"):
        call_command("issue_token", "mallory")


class OneTick:
    """A stop event that lets the loop run exactly one iteration."""

    def __init__(self):
        self.calls = 0

    def wait(self, timeout):
        self.calls += 1
        return self.calls > 1


@pytest.mark.django_db(transaction=True)  # the loop closes stale connections, as a long-lived thread must
def test_the_demo_loop_runs_the_beat_tasks_in_process():
    from tests.factories import build_world

    world = build_world()
    from celery.signals import task_prerun
    from django.conf import settings

    from billing.models import CapacitySnapshot
    from portal.jobs.management.commands.rundemo import scheduler_loop
    from portal.ops.models import QueueSample
    from scheduling.models import CycleRun

    ran: list[str] = []

    def record(sender=None, **kwargs):
        ran.append(sender.name)

    job = world.submit(gpu=1)
    task_prerun.connect(record)
    try:
        scheduler_loop(OneTick(), 0.01)
    finally:
        task_prerun.disconnect(record)
    job.refresh_from_db()
    assert job.state in ("Admitted", "Running")  # admitted by the cycle; the cluster sync then starts it
    assert CycleRun.objects.count() == 1
    assert CapacitySnapshot.objects.exists()
    # Every task beat runs in production ran once in the first tick (schedules, services' autoscaler,
    # notifications, queue samples...), so no page of the demo waits for a task that never comes.
    # (Tasks those ask for, such as the notifications of the job's start, run in-process too.)
    assert {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()} <= set(ran), ran
    assert QueueSample.objects.exists()  # the Queues page's "over time" charts


def test_the_demo_has_node_pools_and_jobs_with_placement_rules(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    call_command("seed_demo", stdout=StringIO())
    assert list(NodePool.objects.values_list("name", "placement")) == [("training", "binpack"), ("inference", "spread")]
    sweep = Job.objects.get(name="resnet-sweep")
    assert sweep.affinity["nodeAffinity"]
    models = {p.node.split("-")[0] for p in sweep.placements.all()}
    assert models <= {"a100", "h100"}
    pretrain = Job.objects.get(name="pretrain")
    racks = {SimNode.objects.get(name=p.node).labels["topology.kubernetes.io/rack"] for p in pretrain.placements.all()}
    assert len(racks) <= 1


def test_the_demo_has_every_workload_kind_of_issue_13(settings):
    from portal.schedules.models import JobSchedule
    from portal.serving.models import InferenceService

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    call_command("seed_demo", stdout=StringIO())
    assert Job.objects.get(name="nightly-eval").off_peak is True
    assert Job.objects.get(name="after-release").start_after is not None
    schedule = JobSchedule.objects.get(name="nightly-finetune")
    assert (schedule.cron, schedule.timezone, schedule.job["off_peak"]) == ("0 2 * * *", "Europe/Berlin", True)
    service = InferenceService.objects.get(name="llama-13b-chat")
    assert (service.gpu_memory_gib, service.state) == (26, "running")
    assert Job.objects.filter(service_replica__service=service, kind="inference").count() == 1
    ray = Job.objects.get(name="ray-tune")
    assert (ray.kind, ray.ray["worker_groups"][0]["replicas"]) == ("ray", 2)
    call_command("seed_demo", stdout=StringIO())
    assert InferenceService.objects.count() == JobSchedule.objects.count() == 1


def test_the_demo_history_is_what_the_engine_does_so_a_replay_with_todays_settings_gives_it_back(settings):
    """The week of seeded history is scheduled by the engine, not invented: at no moment do the recorded
    attempts hold more GPUs of a node than it has or more of a model than a queue's nominal quota plus
    its borrowing limit (recomputed here from the attempts), some jobs really waited, and the what-if's
    replay with today's settings reproduces every admission to the second."""
    from collections import defaultdict
    from datetime import timedelta
    from decimal import Decimal

    from django.utils import timezone

    from portal.jobs.models import FlavorQuota, JobAttempt
    from scheduling.adapters.factory import cluster_backend
    from scheduling.adapters.history import base_snapshot_load, history_load
    from scheduling.selectors import policy_from_settings, replay_timing_from_settings
    from scheduling.sim.figures import admission_differences
    from scheduling.sim.history import replay_history

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    call_command("seed_demo", stdout=StringIO())
    history = [a for a in JobAttempt.objects.select_related("job__team") if "-history-" in a.job.name]
    assert len(history) >= 60
    assert sum(a.admitted_at - a.queued_at > timedelta(minutes=5) for a in history) >= 3  # real waits
    # Holds per node and per (team, model) at every admission, from the attempts alone.
    node_gpus = dict(SimNode.objects.values_list("name", "gpu_count"))
    ceiling = {
        (f.cluster_queue.name.removeprefix("cq-"), f.gpu_model.name): f.nominal_gpus + (f.borrowing_limit or 0)
        for f in FlavorQuota.objects.select_related("cluster_queue", "gpu_model")
    }
    for moment in sorted({a.admitted_at for a in history}):
        on_node: dict[str, Decimal] = defaultdict(Decimal)
        of_team: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
        for a in history:
            if a.admitted_at <= moment and (a.ended_at is None or a.ended_at > moment):
                for p in a.placements:
                    gpus = Decimal(len(p.get("gpu_indices") or ())) or Decimal(p.get("gpu_milli") or 0) / 1000
                    on_node[p["node"]] += gpus if not p.get("mig_profile") else 0
                of_team[(a.job.team.slug, a.gpu_model)] += Decimal(a.gpu_share_7000ths) / 7000
        assert all(on_node[n] <= node_gpus[n] for n in on_node), moment
        assert all(held <= ceiling[key] for key, held in of_team.items()), (moment, of_team)
    # Billed as admitted: each record's GPU model and capacity type are its attempt's, and its GPU
    # share is the attempt's (all replicas).
    from billing.models import UsageRecord

    attempts = {(a.job_id, a.started_at): a for a in history}
    records = list(UsageRecord.objects.filter(job__in=[a.job_id for a in history]))
    assert len(records) >= len(history) - 5  # cancelled before running: none
    for record in records:
        attempt = max(
            (a for (job, started), a in attempts.items() if job == record.job_id and started <= record.start),
            key=lambda a: a.started_at,
        )
        assert (record.gpu_model, record.capacity_type) == (attempt.gpu_model, attempt.capacity_type)
        assert record.gpu_model
    # The what-if's own replay of the whole week with today's settings.
    now = timezone.now()
    start = min(a.queued_at for a in history) - timedelta(seconds=1)
    loaded = history_load(start=start, end=now)
    base = base_snapshot_load(backend=cluster_backend())
    run = replay_history(
        base,
        loaded.jobs,
        policy_from_settings(),
        start_s=start.timestamp(),
        end_s=now.timestamp(),
        **replay_timing_from_settings(),
    )
    mine = {str(a.job_id) for a in history}
    recorded = [a for a in loaded.recorded if a.job_id in mine]
    replayed = [a for a in run.attempts if a.job_id in mine]
    assert admission_differences(recorded, replayed, tolerance_s=1e-3) == []
