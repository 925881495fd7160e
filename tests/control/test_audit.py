"""``manage.py audit`` and ``manage.py cluster_check``: clean on a sound world, loud on each broken invariant."""

from __future__ import annotations

import io
import os

import pytest
from django.core.management import CommandError, call_command
from django.test import TestCase
from django.utils import timezone

from portal.jobs.models import Job, ReplicaPlacement
from portal.jobs.states import JobState
from scheduling.adapters.k8s import manifests as ko
from scheduling.adapters.kubernetes import KubernetesBackend
from scheduling.adapters.simulated import SimulatedCluster
from scheduling.engine.model import ReplicaPlacement as EnginePlacement
from scheduling.invariants import audit_findings
from scheduling.models import SimNode
from scheduling.services import cycle_run
from tests.scheduling.adapters.conftest import settle


def run_cycles(backend, n=2, kube=None):
    for _ in range(n):
        if kube is not None:
            settle(backend, kube)
        with TestCase.captureOnCommitCallbacks(execute=True):
            cycle_run(now=timezone.now(), backend=backend)
    if kube is not None:
        settle(backend, kube)


def test_a_sound_world_audits_clean(world):
    SimNode.objects.create(
        name="mig-0",
        gpu_model=world.models["A100-80GB"],
        gpu_count=2,
        cpu_milli=64_000,
        memory_mib=512 * 1024,
        mig_enabled=True,
    )
    for _ in range(6):
        world.submit(gpu=1)
    world.submit(gpu=0, gpu_milli=250)
    world.submit(gpu=0, mig_profile="3g.40gb")
    run_cycles(SimulatedCluster())
    assert Job.objects.filter(state__in=[JobState.ADMITTED, JobState.RUNNING], mig_profile="3g.40gb").exists()
    assert audit_findings(backend=SimulatedCluster()) == []
    out = io.StringIO()
    call_command("audit", stdout=out)
    assert "audit: clean" in out.getvalue()


def test_it_finds_a_device_given_twice(world):
    first, second = world.submit(gpu=1), world.submit(gpu=1)
    run_cycles(SimulatedCluster())
    a, b = ReplicaPlacement.objects.get(job=first), ReplicaPlacement.objects.get(job=second)
    ReplicaPlacement.objects.filter(pk=b.pk).update(node=a.node, gpu_indices=a.gpu_indices)
    findings = audit_findings(backend=SimulatedCluster())
    assert any(f.check == "capacity" and "over-committed" in f.message for f in findings), findings
    with pytest.raises(CommandError) as failed:
        call_command("audit", stdout=io.StringIO())
    assert failed.value.returncode == 1


def test_it_finds_overlapping_mig_slices_and_cpu_overcommit(world):
    SimNode.objects.create(
        name="mig-0",
        gpu_model=world.models["A100-80GB"],
        gpu_count=2,
        cpu_milli=64_000,
        memory_mib=512 * 1024,
        mig_enabled=True,
    )
    first, second = world.submit(gpu=0, mig_profile="3g.40gb"), world.submit(gpu=0, mig_profile="3g.40gb")
    run_cycles(SimulatedCluster())
    a = ReplicaPlacement.objects.get(job=first)
    ReplicaPlacement.objects.filter(job=second).update(node=a.node, gpu_indices=a.gpu_indices, mig_slot=a.mig_slot)
    ReplicaPlacement.objects.filter(job=first).update(cpu_milli=10_000_000)
    messages = [f.message for f in audit_findings(backend=SimulatedCluster())]
    assert any("overlaps" in m for m in messages), messages
    assert any("CPU over-committed" in m for m in messages), messages


def test_it_finds_a_quota_exceeded(world):
    jobs = [world.submit(gpu=4) for _ in range(2)]
    run_cycles(SimulatedCluster())
    world.cluster_queues["vision"].flavors.filter(gpu_model__name="A100-80GB").update(nominal_gpus=2, borrowing_limit=0)
    findings = audit_findings(backend=SimulatedCluster())
    assert any(f.check == "quota" for f in findings), findings
    assert all(j.pk for j in jobs)


def test_it_finds_broken_histories_and_stray_placements(world):
    job = world.submit(gpu=1)
    run_cycles(SimulatedCluster())
    Job.objects.filter(pk=job.pk).update(state=JobState.SUCCEEDED)  # no transition, placement kept
    messages = [str(f) for f in audit_findings(backend=SimulatedCluster())]
    assert any("history ends in" in m for m in messages), messages
    assert any("still holds a placement" in m for m in messages), messages


@pytest.fixture
def kworld(db):
    from tests.factories import build_world

    return build_world(a100_nodes=0, t4_nodes=0)


def test_it_finds_pods_without_jobs_and_jobs_without_pods(kworld, kube, backend):
    kube.add_node("a100-0", gpus=8)
    kube.auto_run = True
    job = kworld.submit(gpu=1)
    run_cycles(backend, 2, kube)
    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING
    assert audit_findings(backend=backend) == []
    kube.remove_pod("team-vision", f"job-{job.pk}-a1-r0")
    stray = ko.pod_manifest(
        ko.PodJob(777, 1, "team-vision", "vision", "default", "x", (), 1, 100, 100),
        0,
        EnginePlacement(node="a100-0"),
        scheduler_name="gpu-portal",
        run_as_user=1000,
    )
    backend.create_and_bind(stray)
    settle(backend, kube)
    messages = [f.message for f in audit_findings(backend=backend)]
    assert any("job-777-a1-r0 belongs to no job" in m for m in messages), messages
    assert any(f"Running job {job.pk} has 0 of its 1 pods" in m for m in messages), messages


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
