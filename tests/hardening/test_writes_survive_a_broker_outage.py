"""Item 3: with the broker down, a submit or cancel that committed answers success (the next
periodic cycle runs it), and ``Idempotency-Key`` makes a retried submit return the first job."""

from __future__ import annotations

import socket
import threading

import pytest
from django.db import connection

from portal.celery import app as celery_app
from portal.jobs.models import IdempotencyKey, Job

JOB = {"queue": "default", "image": "pytorch:2.4", "gpu": 1}


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # nothing listens once the socket is closed


def drop_broker_connections() -> None:
    """Forget pooled connections to the broker. Not ``celery_app.close()``: that also deregisters the
    app, and shared tasks of a module imported afterwards (``billing.tasks`` in a later test) would
    never register with it (``NotRegistered``)."""
    celery_app._pool = None
    celery_app.amqp._producer_pool = None


@pytest.fixture
def broker_down():
    """Celery sends for real, to a Redis port nothing listens on (a broker that is down)."""
    saved = {k: celery_app.conf[k] for k in ("task_always_eager", "broker_url")}
    celery_app.conf.update(task_always_eager=False, broker_url=f"redis://127.0.0.1:{closed_port()}/0")
    drop_broker_connections()  # no pooled connection to the real broker
    yield
    celery_app.conf.update(saved)
    drop_broker_connections()


@pytest.mark.django_db
def test_a_submit_and_a_cancel_succeed_while_the_broker_is_down(api, world, broker_down):
    alice = api("alice")
    created = alice.post("/api/v1/jobs/", JOB, format="json")
    assert created.status_code == 201, created.content
    job_id = created.json()["id"]
    assert Job.objects.get(pk=job_id).state == "Pending"
    cancelled = alice.post(f"/api/v1/jobs/{job_id}/cancel/")
    assert cancelled.status_code == 200, cancelled.content
    assert Job.objects.get(pk=job_id).state == "Cancelled"


@pytest.mark.django_db
def test_a_retried_submit_with_the_same_idempotency_key_returns_the_first_job(api, world, broker_down):
    alice = api("alice")
    first = alice.post("/api/v1/jobs/", JOB, format="json", headers={"Idempotency-Key": "nb-42"})
    again = alice.post("/api/v1/jobs/", JOB, format="json", headers={"Idempotency-Key": "nb-42"})
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()
    assert again["Idempotent-Replayed"] == "true"
    assert Job.objects.count() == 1


@pytest.mark.django_db
def test_the_same_key_with_another_body_is_a_422_naming_the_header(api, world):
    alice = api("alice")
    assert alice.post("/api/v1/jobs/", JOB, format="json", headers={"Idempotency-Key": "k1"}).status_code == 201
    other = alice.post("/api/v1/jobs/", {**JOB, "gpu": 2}, format="json", headers={"Idempotency-Key": "k1"})
    assert other.status_code == 422
    assert "Idempotency-Key" in other.json()["errors"]
    assert Job.objects.count() == 1


@pytest.mark.django_db
def test_keys_are_per_user_expire_after_a_day_and_a_refused_submit_does_not_use_the_key(api, world, settings):
    alice, bob = api("alice"), api("bob")
    refused = alice.post("/api/v1/jobs/", {**JOB, "gpu": -1}, format="json", headers={"Idempotency-Key": "k"})
    assert refused.status_code == 400
    assert not IdempotencyKey.objects.exists()
    a = alice.post("/api/v1/jobs/", JOB, format="json", headers={"Idempotency-Key": "k"}).json()["id"]
    b = bob.post("/api/v1/jobs/", JOB, format="json", headers={"Idempotency-Key": "k"}).json()["id"]
    assert a != b
    settings.IDEMPOTENCY_TTL_S = 0
    c = alice.post("/api/v1/jobs/", JOB, format="json", headers={"Idempotency-Key": "k"}).json()["id"]
    assert c not in (a, b)


@pytest.mark.django_db
@pytest.mark.parametrize("key", ["", "x" * 256, "caf\u00e9"])
def test_a_malformed_idempotency_key_is_a_400_naming_the_header(api, world, key):
    response = api("alice").post(
        "/api/v1/jobs/", JOB, format="json", HTTP_IDEMPOTENCY_KEY=key.encode("utf-8").decode("latin-1")
    )
    assert response.status_code == 400
    assert "Idempotency-Key" in response.json()["errors"]


@pytest.mark.django_db(transaction=True)
def test_two_racing_requests_with_one_key_create_one_job(api, world):
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL's row locks")
    answers: list[int] = []

    def post() -> None:
        try:
            answers.append(
                api("alice").post("/api/v1/jobs/", JOB, format="json", headers={"Idempotency-Key": "race"}).json()["id"]
            )
        finally:
            connection.close()

    threads = [threading.Thread(target=post) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(answers) == 4
    assert len(set(answers)) == 1
    assert Job.objects.count() == 1


@pytest.mark.django_db
def test_the_api_answers_unthrottled_while_the_throttle_log_is_unreachable(api, world, settings):
    """Redis down (the cache's port closed): a read and a submit go through, they do not fail with 500."""
    port = closed_port()
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": f"redis://127.0.0.1:{port}/0"}
    }
    settings.API_THROTTLE_USER = "1/min"  # would refuse the second request if the log were kept
    alice = api("alice")
    assert alice.get("/api/v1/teams/").status_code == 200
    assert alice.get("/api/v1/teams/").status_code == 200
    created = alice.post("/api/v1/jobs/", {"queue": "default", "image": "pytorch:2.4", "gpu": 1}, format="json")
    assert created.status_code == 201, created.content
