"""``scheduling.invariants`` (``manage.py audit``): clean on a sound world, loud on each broken invariant,
and silent about states that never existed: it reads one consistent snapshot, so a cycle committing between
its queries cannot raise a false alarm (the race is staged with Django's ``execute_wrapper``)."""

from __future__ import annotations

import io
import threading
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import TestCase
from django.utils import timezone

from portal.jobs.models import Job, ReplicaPlacement
from portal.jobs.states import JobState
from scheduling.adapters.k8s import manifests as ko
from scheduling.adapters.simulated import SimulatedCluster
from scheduling.engine.model import ReplicaPlacement as EnginePlacement
from scheduling.invariants import audit_findings
from scheduling.models import NodePool, SimNode
from scheduling.services import cycle_run
from tests.scheduling.adapters.conftest import settle
from tests.scheduling.helpers import run_cycles


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


def test_an_overcommitted_pool_audits_clean_up_to_its_ratio_and_not_beyond(world):
    SimNode.objects.exclude(name="a100-0").delete()
    SimNode.objects.filter(name="a100-0").update(gpu_count=1, labels={"pool": "nb"})
    NodePool.objects.create(name="nb", node_selector={"pool": "nb"}, overcommit_ratio=Decimal("1.2"))
    jobs = [world.submit(gpu=0, gpu_milli=300) for _ in range(4)]  # 1200 of 1200
    run_cycles(SimulatedCluster())
    assert ReplicaPlacement.objects.count() == 4
    assert audit_findings(backend=SimulatedCluster()) == []
    # Without the pool the same device holds 1200 of 1000 milli.
    NodePool.objects.all().delete()
    findings = audit_findings(backend=SimulatedCluster())
    assert [f.message for f in findings if f.check == "capacity"] == [
        f"a100-0 GPU 0 over-committed: 1200/1000 milli ({', '.join(sorted(f'job {j.pk}' for j in jobs))})"
    ]


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


def admit_from_another_connection() -> None:
    def cycle() -> None:
        try:
            with TestCase.captureOnCommitCallbacks(execute=False):
                cycle_run(now=timezone.now(), backend=SimulatedCluster())
        finally:
            connection.close()

    thread = threading.Thread(target=cycle)
    thread.start()
    thread.join()


@pytest.mark.django_db(transaction=True)
def test_the_audit_sees_no_false_alarm_when_a_cycle_commits_between_its_reads(world):
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL's snapshots")
    for _ in range(3):
        world.submit(gpu=1)
    fired: list[str] = []

    def race(execute, sql, params, many, context):
        if not fired and "jobs_jobtransition" in sql:
            fired.append(sql)
            admit_from_another_connection()  # commits while the audit is between two reads
        return execute(sql, params, many, context)

    with connection.execute_wrapper(race):
        findings = audit_findings(backend=SimulatedCluster())
    assert fired, "the race was not staged"
    assert findings == []
    assert audit_findings(backend=SimulatedCluster()) == []  # and the admitted state itself is sound
