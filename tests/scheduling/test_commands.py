"""The scheduling app's management commands: ``cluster_check`` (nodes, models, problems, RBAC gaps) and
``dump_snapshot`` (replaying the next cycle offline)."""

from __future__ import annotations

import io
import json
import os
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from portal.jobs.models import Job
from scheduling.adapters.kubernetes import KubernetesBackend
from scheduling.adapters.simulated import SimulatedCluster
from scheduling.management.commands.schedule_snapshot import schedule_file
from scheduling.services import cycle_run
from tests.scheduling.adapters.conftest import settle
from tests.scheduling.helpers import run_cycles


def test_cluster_check_prints_nodes_models_problems_and_rbac_gaps(kworld, kube, backend, settings):
    settings.CLUSTER_BACKEND = "kubernetes"
    KubernetesBackend._instances = {os.getpid(): backend}
    try:
        kube.add_node("a100-0", gpus=8, labels={"topology.kubernetes.io/rack": "r1"})
        kube.add_node("mystery", gpus=4, product="NVIDIA-B200")
        bare = kube.add_node("no-plugin", gpus=0, labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
        assert bare
        kube.add_foreign_pod("kube-system", "dcgm", "a100-0", gpus=1)
        settle(backend, kube)
        out = io.StringIO()
        call_command("cluster_check", stdout=out)
        text = out.getvalue()
        assert "a100-0" in text
        assert "A100-80GB" in text
        assert "B200 is not a portal GPU model" in text
        assert "device plugin" in text
        assert "no topology.kubernetes.io/rack label" in text
        line = next(x for x in text.splitlines() if x.startswith("a100-0"))
        assert line.split()[2:4] == ["8", "7"]  # 8 GPUs, 7 free: the foreign pod holds one
        kube.denied.add(("create", "pods"))
        with pytest.raises(CommandError):
            call_command("cluster_check", stdout=(out := io.StringIO()))
        assert "cannot create pods in team-vision" in out.getvalue()
    finally:
        KubernetesBackend._instances = {}


def test_cluster_check_on_the_simulated_cluster_lists_its_nodes(world):
    world.submit(gpu=2)
    run_cycles(SimulatedCluster(), 1)
    out = io.StringIO()
    call_command("cluster_check", stdout=out)
    text = out.getvalue()
    assert "cluster backend: simulated" in text
    assert "GPU models: A100-80GB ×16, T4 ×4" in text
    assert "3 nodes, 20 GPUs" in text


pytestmark = pytest.mark.django_db


def test_dump_snapshot_reproduces_the_next_cycle_offline(world, tmp_path):
    for _ in range(3):
        world.submit(gpu=8, allowed_gpu_models=(world.models["A100-80GB"],))
    world.submit("nlp", gpu=0, gpu_milli=250, allowed_gpu_models=(world.models["T4"],))
    path = tmp_path / "snap.json"
    call_command("dump_snapshot", str(path), stderr=StringIO())
    data = json.loads(path.read_text())
    assert len(data["nodes"]) == 3
    plan = schedule_file(path)
    admitted = sorted(a["workload_id"] for a in plan["admissions"])
    assert len(admitted) == 3

    from scheduling.adapters.simulated import SimulatedCluster

    cycle_run(now=timezone.now(), backend=SimulatedCluster())
    live = sorted(str(pk) for pk in Job.objects.filter(state="Admitted").values_list("pk", flat=True))
    assert live == admitted


class OneTick:
    """A stop event that lets the loop run exactly one iteration."""

    def __init__(self):
        self.calls = 0

    def wait(self, timeout):
        self.calls += 1
        return self.calls > 1
