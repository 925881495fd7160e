"""Item 1: every list and string of a job spec is bounded and toleration keys are checked as
Kubernetes checks them, so one tenant's request cannot make the cycle slower for everyone."""

from __future__ import annotations

import json

import pytest

from portal.jobs.models import Job
from portal.jobs.services import MAX_COMMAND_ARGS, MAX_LABELS, MAX_NODE_SELECTOR, MAX_TOLERATIONS
from portal.tenants.models import TolerationGrant

pytestmark = pytest.mark.django_db

JOB = {"queue": "default", "image": "pytorch:2.4", "gpu": 1}


def submit(client, **fields):
    return client.post("/api/v1/jobs/", {**JOB, **fields}, format="json")


def test_forty_thousand_tolerations_are_refused_with_a_400_naming_the_field_and_nothing_is_stored(api, world):
    TolerationGrant.objects.create(team=world.teams["vision"], key="spot")
    body = {**JOB, "tolerations": [{"key": "spot", "operator": "Exists"}] * 40_000}
    response = api("alice").post("/api/v1/jobs/", data=json.dumps(body), content_type="application/json")
    assert response.status_code in (400, 413), response.content[:300]
    assert "tolerations" in response.json()["errors"] or "body" in response.json()["errors"]
    assert Job.objects.count() == 0


def test_one_toleration_more_than_the_limit_is_a_400_naming_tolerations(api, world):
    TolerationGrant.objects.create(team=world.teams["vision"], key="spot")
    response = submit(api("alice"), tolerations=[{"key": "spot", "operator": "Exists"}] * (MAX_TOLERATIONS + 1))
    assert response.status_code == 400
    assert "tolerations" in response.json()["errors"]
    ok = submit(api("alice"), tolerations=[{"key": "spot", "operator": "Exists"}] * MAX_TOLERATIONS)
    assert ok.status_code == 201, ok.json()


@pytest.mark.parametrize(
    ("toleration", "message"),
    [
        ({"key": "bad key!", "operator": "Exists"}, "not a qualified name"),
        ({"key": "a/b/c", "operator": "Exists"}, "not a qualified name"),
        ({"key": "-spot", "operator": "Exists"}, "not a qualified name"),
        ({"key": "x" * 64, "operator": "Exists"}, "not a qualified name"),
        ({"key": "", "operator": "Equal", "value": "x"}, "without a key must use operator Exists"),
        ({"key": "spot", "operator": "Exists", "value": "x"}, "Exists takes no value"),
        ({"key": "spot", "operator": "Equal", "value": "has space"}, "not a label value"),
        ({"key": "spot", "operator": "Gt"}, "not a valid choice"),
        ({"key": "spot", "effect": "Sometimes"}, "not a valid choice"),
        ({"key": "spot", "tolerationSeconds": 5}, "unknown field"),
    ],
)
def test_a_toleration_kubernetes_would_refuse_is_a_400_naming_tolerations(api, world, toleration, message):
    TolerationGrant.objects.create(team=world.teams["vision"], all_taints=True)
    response = submit(api("alice"), tolerations=[toleration])
    assert response.status_code == 400, response.content
    assert "tolerations" in response.json()["errors"]
    assert message in json.dumps(response.json()), response.json()
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"command": ["x"] * (MAX_COMMAND_ARGS + 1)}, "command"),
        ({"command": ["x" * 5000]}, "command"),
        ({"command": "x " * 20_000}, "command"),
        ({"labels": {f"k{i}": "v" for i in range(MAX_LABELS + 1)}}, "labels"),
        ({"node_selector": {f"k{i}": "v" for i in range(MAX_NODE_SELECTOR + 1)}}, "node_selector"),
        ({"allowed_gpu_models": ["A100-80GB"] * 33}, "allowed_gpu_models"),
        ({"name": "n" * 101}, "name"),
        ({"image": "i" * 501}, "image"),
        ({"namespace": "n" * 64}, "namespace"),
        ({"team": "t" * 64}, "team"),
        ({"queue": "q" * 131}, "queue"),
        ({"priority_class": "p" * 65}, "priority_class"),
        ({"mig_profile": "m" * 21}, "mig_profile"),
    ],
)
def test_every_list_and_string_of_a_spec_has_a_bound_named_in_the_400(api, world, fields, field):
    response = submit(api("alice"), **fields)
    assert response.status_code == 400, response.content[:300]
    assert field in response.json()["errors"], response.json()
    assert Job.objects.count() == 0


def test_an_oversized_body_is_a_413_before_it_is_parsed(api, world):
    body = json.dumps({**JOB, "name": "x" * 300_000})
    response = api("alice").post("/api/v1/jobs/", data=body, content_type="application/json")
    assert response.status_code == 413
    assert "body" in response.json()["errors"]
