"""Inference services: replicas are jobs in the team's queue, the autoscaler follows the load with a
stabilization window, scale-down releases quota at once, a model no GPU can hold is refused."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from portal.jobs.errors import ServiceError
from portal.jobs.models import Job
from portal.serving.load import Load
from portal.serving.models import InferenceService, ServiceSample
from portal.serving.services import ServiceSpec, service_create, service_stop, services_autoscale
from scheduling.adapters.simulated import SimulatedCluster
from scheduling.services import cycle_run

T0 = datetime(2026, 1, 5, 12, tzinfo=UTC)
pytestmark = pytest.mark.django_db


def spec(world, **overrides) -> ServiceSpec:
    values = {
        "name": "chat",
        "local_queue": world.queues["vision"],
        "priority_class": world.priorities["default"],
        "image": "vllm/vllm-openai:v0.6.0",
        "model_family": "llama",
        "model_size_b": 13,
        "min_replicas": 1,
        "max_replicas": 4,
        "target_per_replica": 10.0,
    }
    values.update(overrides)
    return ServiceSpec(**values)


def replicas(service) -> list[Job]:
    return list(Job.objects.filter(service_replica__service=service).order_by("id"))


def active(service) -> list[Job]:
    return [j for j in replicas(service) if j.state in ("Pending", "Admitted", "Running")]


def load(value):
    return lambda service: Load(value, "test")


def test_a_service_starts_its_minimum_as_inference_jobs_in_the_teams_queue(world):
    service = service_create(owner=world.users["alice"], spec=spec(world, min_replicas=2), now=T0)
    jobs = replicas(service)
    assert [(j.kind, j.replicas, j.gpu_memory_gib, j.state, j.local_queue.name) for j in jobs] == [
        ("inference", 1, 26, "Pending", "default")
    ] * 2
    cycle_run(now=T0, backend=SimulatedCluster())
    assert {j.state for j in replicas(service)} == {"Admitted"}
    # 26 GiB fits one 80 GB A100: one GPU per replica.
    assert [j.placements.get().gpu_indices.__len__() for j in replicas(service)] == [1, 1]


def test_a_70b_model_takes_two_80gb_gpus_per_replica(world):
    service = service_create(owner=world.users["alice"], spec=spec(world, model_size_b=70), now=T0)
    cycle_run(now=T0, backend=SimulatedCluster())
    [job] = replicas(service)
    assert (job.gpu_memory_gib, len(job.placements.get().gpu_indices), job.gpu_model.name) == (140, 2, "A100-80GB")


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"min_replicas": 5, "max_replicas": 2}, "min_replicas"),
        ({"model_size_b": 405}, "model_size_b"),  # 810 GiB: more than the 8 x 80 GB of the largest node
        ({"model_size_b": None, "gpu_memory_gib": 0}, "model_size_b"),
        ({"model_size_b": 7, "gpu_memory_gib": 20}, "gpu_memory_gib"),
        ({"target_per_replica": 0}, "target_per_replica"),
    ],
)
def test_a_bad_service_is_refused_naming_the_field_and_leaves_nothing(world, overrides, field):
    with pytest.raises(ServiceError) as exc:
        service_create(owner=world.users["alice"], spec=spec(world, **overrides), now=T0)
    assert exc.value.field == field
    assert InferenceService.objects.count() == Job.objects.count() == 0


def test_the_autoscaler_scales_up_at_once_and_down_after_the_window(world):
    service = service_create(owner=world.users["alice"], spec=spec(world), now=T0)
    [sample] = services_autoscale(now=T0, load_of=load(35.0))  # ceil(35 / 10) = 4
    assert (sample.recommended, sample.desired, len(active(service))) == (4, 4, 4)
    # The load drops: within the 300 s window the 4 stay.
    [sample] = services_autoscale(now=T0 + timedelta(seconds=60), load_of=load(5.0))
    assert (sample.recommended, sample.desired, len(active(service))) == (1, 4, 4)
    [sample] = services_autoscale(now=T0 + timedelta(seconds=200), load_of=load(5.0))
    assert sample.desired == 4
    # After the window only the low recommendations remain.
    [sample] = services_autoscale(now=T0 + timedelta(seconds=400), load_of=load(5.0))
    assert (sample.desired, len(active(service))) == (1, 1)
    assert ServiceSample.objects.filter(service=service).count() == 4


def test_scale_up_waits_in_the_queue_and_scale_down_releases_quota_at_once(world):
    # The team's queue holds 8 A100s: 70B replicas take 2 each, so at most 4 run; a fifth waits.
    world.cluster_queues["vision"].cohort = ""
    world.cluster_queues["vision"].save()
    service = service_create(
        owner=world.users["alice"],
        spec=spec(world, model_size_b=70, max_replicas=6, allowed_gpu_models=(world.models["A100-80GB"],)),
        now=T0,
    )
    services_autoscale(now=T0, load_of=load(55.0))  # 6 replicas wanted
    backend = SimulatedCluster()
    cycle_run(now=T0, backend=backend)
    states = sorted(j.state for j in active(service))
    assert states == ["Admitted"] * 4 + ["Pending"] * 2
    pending = next(j for j in active(service) if j.state == "Pending")
    assert pending.pending_reason["kind"] == "quota"
    # Load falls after the window: the waiting replicas go first, then running ones; their quota is free.
    services_autoscale(now=T0 + timedelta(seconds=400), load_of=load(15.0))
    left = active(service)
    assert sorted(j.state for j in left) == ["Admitted", "Admitted"]
    cancelled = [j for j in replicas(service) if j.state == "Cancelled"]
    assert len(cancelled) == 4
    other = world.submit(gpu=4)  # 4 GPUs of the queue's 8 are free again at once
    cycle_run(now=T0 + timedelta(seconds=401), backend=backend)
    other.refresh_from_db()
    assert other.state == "Admitted"


def test_stopping_a_service_cancels_every_replica(world):
    service = service_create(owner=world.users["alice"], spec=spec(world, min_replicas=3), now=T0)
    with pytest.raises(ServiceError):
        service_stop(service=service, by=world.users["bob"])
    service = service_stop(service=service, by=world.users["alice"], now=T0)
    assert service.state == "stopped"
    assert {j.state for j in replicas(service)} == {"Cancelled"}
    assert services_autoscale(now=T0, load_of=load(100.0)) == []


def test_a_replica_that_ended_is_replaced(world):
    service = service_create(owner=world.users["alice"], spec=spec(world), now=T0)
    [job] = replicas(service)
    Job.objects.filter(pk=job.pk).update(state="Failed")
    services_autoscale(now=T0, load_of=load(1.0))
    assert len(active(service)) == 1
    assert len(replicas(service)) == 2


def test_no_load_reading_changes_nothing(world):
    service = service_create(owner=world.users["alice"], spec=spec(world), now=T0)
    assert services_autoscale(now=T0, load_of=lambda s: None) == []
    assert len(active(service)) == 1
