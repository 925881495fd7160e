"""Item 7: nothing tells one team about another; /metrics and the schema are closed by default."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from portal.jobs.models import LocalQueue

ROOT = Path(__file__).resolve().parents[2]
JOB = {"image": "pytorch:2.4", "gpu": 1}


@pytest.mark.django_db
def test_another_teams_queue_and_a_queue_nobody_has_get_the_same_answer(api, world):
    LocalQueue.objects.create(
        name="secret-project", team=world.teams["vision"], cluster_queue=world.cluster_queues["vision"]
    )
    bob = api("bob")
    theirs = bob.post("/api/v1/jobs/", {**JOB, "queue": "secret-project"}, format="json").json()
    nobodys = bob.post("/api/v1/jobs/", {**JOB, "queue": "no-such-queue"}, format="json").json()
    assert theirs["detail"].replace("secret-project", "Q") == nobodys["detail"].replace("no-such-queue", "Q")
    as_path = bob.post("/api/v1/jobs/", {**JOB, "queue": "vision/secret-project"}, format="json").json()
    none_path = bob.post("/api/v1/jobs/", {**JOB, "queue": "nope/secret-project"}, format="json").json()
    assert as_path["detail"].replace("vision", "T") == none_path["detail"].replace("nope", "T")


@pytest.mark.django_db
def test_metrics_are_closed_until_a_token_is_configured(client, settings):
    settings.METRICS_TOKEN = ""
    assert client.get("/metrics").status_code == 403
    settings.METRICS_TOKEN = "t0k3n"
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer t0k3n"}).status_code == 200


def test_docker_compose_and_the_deploy_secret_never_leave_the_metrics_token_empty():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    token = compose["x-portal"]["environment"]["METRICS_TOKEN"]
    assert token.startswith("${METRICS_TOKEN:?"), token  # compose refuses to start without one
    secret = next(
        doc for doc in yaml.safe_load_all((ROOT / "deploy" / "secret.yaml").read_text()) if doc["kind"] == "Secret"
    )
    assert secret["stringData"]["METRICS_TOKEN"]  # a placeholder the portal refuses to start with
    example = dict(
        line.split("=", 1)
        for line in (ROOT / ".env.example").read_text().splitlines()
        if "=" in line and line[0] != "#"
    )
    assert example["METRICS_TOKEN"].startswith("change-me")
