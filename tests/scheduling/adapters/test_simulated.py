"""``SimulatedCluster``: each ``SimNode`` row as the engine's node, in name order; what it observes."""

from __future__ import annotations

import pytest

from scheduling.adapters.simulated import SimulatedCluster
from scheduling.engine.model import GpuNode, Taint
from scheduling.models import SimNode

pytestmark = pytest.mark.django_db


def test_every_simulated_node_reaches_the_engine_with_its_model_labels_and_taints(world):
    SimNode.objects.create(
        name="a100-mig",
        gpu_model=world.models["A100-80GB"],
        gpu_count=4,
        cpu_milli=64_000,
        memory_mib=512 * 1024,
        labels={"zone": "b", "karpenter.sh/capacity-type": "spot"},
        taints=[{"key": "spot", "value": "true", "effect": "NoExecute"}, {"key": "dedicated"}],
        unschedulable=True,
        mig_enabled=True,
    )
    SimNode.objects.create(name="cpu-0", gpu_model=None, cpu_milli=16_000, memory_mib=65_536)
    nodes = {n.name: n for n in SimulatedCluster().nodes()}
    assert [n.name for n in SimulatedCluster().nodes()] == sorted(nodes)
    assert nodes["a100-mig"] == GpuNode(
        name="a100-mig",
        gpu_model="A100-80GB",
        gpu_count=4,
        cpu_milli=64_000,
        memory_mib=512 * 1024,
        gpu_memory_gib=80,
        labels=(("karpenter.sh/capacity-type", "spot"), ("zone", "b")),
        taints=(Taint("spot", "true", "NoExecute"), Taint("dedicated", "", "NoSchedule")),
        unschedulable=True,
        mig_enabled=True,
    )
    assert nodes["cpu-0"] == GpuNode(
        name="cpu-0", gpu_model=None, gpu_count=0, cpu_milli=16_000, memory_mib=65_536, gpu_memory_gib=0
    )
    assert (nodes["t4-0"].gpu_model, nodes["t4-0"].gpu_memory_gib) == ("T4", 16)  # the world's own


def test_observe_sees_each_job_finish_exactly_when_its_runtime_is_up_and_a_lost_node_at_once(api, world):
    """``observe`` reads only jobs that may have news; what it reports must be what the rule says for
    every admitted and running job, to the microsecond at a finish time."""
    from datetime import timedelta

    from django.utils import timezone

    from portal.jobs.models import Job, ReplicaPlacement
    from scheduling.services import cycle_run

    alice = api("alice")
    body = {"queue": "default", "image": "pytorch:2.4", "gpu": 4, "allowed_gpu_models": ["A100-80GB"]}
    runtimes = {
        alice.post("/api/v1/jobs/", {**body, "runtime_s": s}, format="json").json()["id"]: s for s in (61, 7, 3600)
    }
    backend = SimulatedCluster(speedup=60)
    start = timezone.now().replace(microsecond=0) - timedelta(hours=1)
    cycle_run(now=start, backend=backend)
    assert set(Job.objects.filter(state="Admitted").values_list("id", flat=True)) == set(runtimes)
    # Admitted: each is seen running from its admission, nothing else yet.
    assert sorted((o.job_id, o.state, o.at) for o in backend.observe(now=start)) == sorted(
        (job_id, "Running", start) for job_id in runtimes
    )
    cycle_run(now=start + timedelta(microseconds=1), backend=backend)
    assert Job.objects.filter(state="Running").count() == 3
    for job_id, runtime_s in runtimes.items():
        done = start + timedelta(seconds=runtime_s / 60)
        finished = {o.job_id: o for o in backend.observe(now=done) if o.state == "Succeeded"}
        assert finished[job_id].at == done
        assert job_id not in {o.job_id for o in backend.observe(now=done - timedelta(microseconds=1))}
        assert set(finished) == {j for j, s in runtimes.items() if s <= runtime_s}
    # The longest job's node is deleted: its jobs still running are seen lost at once (requeued: the
    # default restart policy), long before they are due; the others finished by then.
    longest = max(runtimes, key=runtimes.get)
    node = ReplicaPlacement.objects.get(job_id=longest).node
    on_node = set(ReplicaPlacement.objects.filter(node=node).values_list("job_id", flat=True))
    SimNode.objects.filter(name=node).delete()
    now = start + timedelta(seconds=30)
    expected = {
        (j, "Pending", now) if j in on_node and s / 60 > 30 else (j, "Succeeded", start + timedelta(seconds=s / 60))
        for j, s in runtimes.items()
        if j in on_node or s / 60 <= 30
    }
    assert {(o.job_id, o.state, o.at) for o in backend.observe(now=now)} == expected
    assert (longest, "Pending", now) in expected
