"""The client's schedules and inference services against a live portal."""

from __future__ import annotations

import pytest

from gpuportal import Portal, ValidationError
from portal.serving.services import services_autoscale

SERVICE = {
    "name": "chat",
    "queue": "default",
    "image": "vllm/vllm-openai:v0.6.0",
    "model_family": "llama",
    "model_size_b": 70,
    "min_replicas": 1,
    "max_replicas": 2,
    "target_per_replica": 10,
}


@pytest.mark.django_db(transaction=True)
def test_a_schedule_is_created_listed_paused_and_deleted_from_python(portal_url, key_of):
    with Portal(portal_url, key_of("alice")) as portal:
        job = {"queue": "default", "image": "nvcr.io/nvidia/pytorch:24.08-py3", "gpu": 1, "off_peak": True}
        schedule = portal.schedule("nightly", job, cron="0 2 * * *", timezone="Europe/Berlin")
        assert (schedule.cron, schedule.timezone, schedule.enabled, schedule.job["off_peak"]) == (
            "0 2 * * *",
            "Europe/Berlin",
            True,
            True,
        )
        assert [s.name for s in portal.schedules()] == ["nightly"]
        assert portal.pause_schedule(schedule).enabled is False
        assert portal.schedule_runs(schedule) == []
        with pytest.raises(ValidationError) as exc:
            portal.schedule("bad", job, cron="0 2 * *")
        assert "cron" in exc.value.errors
        portal.delete_schedule(schedule)
        assert portal.schedules() == []


@pytest.mark.django_db(transaction=True)
def test_a_service_is_started_scaled_and_stopped_from_python(portal_url, key_of):
    with Portal(portal_url, key_of("alice")) as portal:
        service = portal.create_service(SERVICE)
        assert (service.state, service.gpu_memory_gib, service.desired_replicas) == ("running", 140, 1)
        services_autoscale()
        samples = portal.service_samples(service)
        assert len(samples) == 1
        assert samples[0].source == "simulated"
        assert [s.name for s in portal.services()] == ["chat"]
        stopped = portal.stop_service(service)
        assert stopped.state == "stopped"
        with pytest.raises(ValidationError) as exc:
            portal.create_service({**SERVICE, "name": "big", "min_replicas": 3})
        assert "min_replicas" in exc.value.errors


@pytest.mark.django_db(transaction=True)
def test_a_ray_job_is_submitted_from_python_and_a_bad_group_is_named(portal_url, key_of):
    ray = {
        "mode": "job",
        "entrypoint": "python train.py",
        "worker_groups": [{"name": "gpu", "replicas": 2, "gpu": 4, "cpu_milli": 8000, "memory_mib": 65536}],
    }
    spec = {"queue": "default", "image": "rayproject/ray:2.34.0", "kind": "ray", "cpu_milli": 2000, "ray": ray}
    with Portal(portal_url, key_of("alice")) as portal:
        job = portal.submit(spec)
        assert (job.kind, job.replicas, job.ray) == ("ray", 1, ray)
        with pytest.raises(ValidationError) as exc:
            portal.submit({**spec, "ray": {**ray, "worker_groups": [{"name": "gpu", "replicas": 0}]}})
        assert "ray.worker_groups.0.replicas" in exc.value.errors
