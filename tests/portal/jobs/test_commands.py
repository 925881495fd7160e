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
    from billing.models import CapacitySnapshot
    from portal.jobs.management.commands.rundemo import scheduler_loop
    from scheduling.models import CycleRun

    job = world.submit(gpu=1)
    scheduler_loop(OneTick(), 0.01)
    job.refresh_from_db()
    assert job.state == "Admitted"
    assert CycleRun.objects.count() == 1
    assert CapacitySnapshot.objects.exists()


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
