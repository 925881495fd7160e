"""The services pages: start one with the form (a bad one names the field), see replicas against load, stop it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from portal.serving.models import InferenceService
from portal.serving.services import services_autoscale

pytestmark = pytest.mark.django_db
FORM = {
    "name": "chat",
    "queue": "vision/default",
    "image": "vllm/vllm-openai:v0.6.0",
    "model_family": "llama",
    "model_size_b": "70",
    "min_replicas": "1",
    "max_replicas": "3",
    "metric": "rps",
    "target_per_replica": "20",
}


def test_start_watch_and_stop_a_service_from_the_pages(client, world):
    client.force_login(world.users["alice"])
    assert "Start a service" in client.get("/services/").content.decode()
    bad = client.post("/services/", {**FORM, "min_replicas": "5"})
    assert bad.status_code == 400
    assert "min_replicas (5) is above max_replicas (3)" in bad.content.decode()
    created = client.post("/services/", FORM)
    assert created.status_code == 302, created.content.decode()[:3000]
    service = InferenceService.objects.get()
    now = timezone.now()
    for step in range(3):
        services_autoscale(now=now + timedelta(seconds=15 * step))
    page = client.get(f"/services/{service.pk}/").content.decode()
    assert "replicas against load" in page
    assert "140 GiB GPU memory per replica" in page
    assert "Latest autoscaler passes" in page
    assert client.get(f"/services/{service.pk}/", follow=False).status_code == 200
    client.force_login(world.users["bob"])
    assert client.get(f"/services/{service.pk}/").status_code == 404
    client.force_login(world.users["alice"])
    client.post(f"/services/{service.pk}/stop/")
    service.refresh_from_db()
    assert service.state == "stopped"
