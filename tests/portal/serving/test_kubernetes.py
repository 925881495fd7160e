"""An inference service on the Kubernetes backend (the in-test API server, the real client): each
replica is a pod in the team's namespace with its GPUs requested, and stopping deletes them."""

from __future__ import annotations

from django.utils import timezone

from portal.serving.load import Load
from portal.serving.services import ServiceSpec, service_create, service_stop, services_autoscale
from tests.scheduling.adapters.conftest import cycle


def test_a_70b_service_scales_to_pods_of_two_gpus_and_stopping_deletes_them(kworld, kube, backend):
    kube.add_node("a100-0", gpus=8)
    kube.add_node("a100-1", gpus=8)
    now = timezone.now()
    spec = ServiceSpec(
        name="chat",
        local_queue=kworld.queues["vision"],
        priority_class=kworld.priorities["default"],
        image="vllm/vllm-openai:v0.6.0",
        model_size_b=70,
        min_replicas=1,
        max_replicas=3,
        target_per_replica=10.0,
    )
    service = service_create(owner=kworld.users["alice"], spec=spec, now=now)
    services_autoscale(now=now, load_of=lambda s: Load(25.0, "test"))  # ceil(25 / 10) = 3 replicas
    cycle(backend, kube)
    pods = [p for p in kube.pods.values() if p["metadata"]["namespace"] == "team-vision"]
    assert len(pods) == 3
    for pod in pods:
        limits = pod["spec"]["containers"][0]["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == "2"  # 140 GiB on 80 GB GPUs
        assert pod["metadata"]["labels"].get("inference-service") == "chat"
    service_stop(service=service, by=kworld.users["alice"])
    cycle(backend, kube)  # the backend converges: pods of cancelled jobs are deleted
    assert list(kube.pods) == []
