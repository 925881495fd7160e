"""Item 4: the hand-written hostile requests that made server errors are 400s naming the field.

The schema-driven sweep over every endpoint is ``test_schema_fuzz.py``; the database outage is
``test_database_outage.py``.
"""

from __future__ import annotations

import json

import pytest

from portal.jobs.models import ClusterQueue, Job

pytestmark = pytest.mark.django_db

JOB = {"queue": "default", "image": "pytorch:2.4", "gpu": 1}


def test_json_nested_a_thousand_deep_is_a_400_naming_the_body(api, world):
    body = '{"queue": "default", "image": "x", "labels": ' + "[" * 1000 + "]" * 1000 + "}"
    response = api("alice").post("/api/v1/jobs/", data=body, content_type="application/json")
    assert response.status_code == 400
    assert "body" in response.json()["errors"]
    assert "nested deeper" in response.json()["detail"]


def test_json_nested_deep_inside_a_field_is_a_400_too(api, world):
    inner = json.loads("[" * 30 + "]" * 30)
    response = api("alice").post("/api/v1/jobs/", {**JOB, "tolerations": inner}, format="json")
    assert response.status_code == 400
    assert "nested deeper" in response.json()["detail"]


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"command": ["python", "a\x00b"]}, "command[1]"),
        ({"command": "python a\x00b"}, "command"),
        ({"name": "x\x00"}, "name"),
        ({"labels": {"k\x00": "v"}}, "labels"),
        ({"image": "py\x00torch"}, "image"),
    ],
)
def test_a_nul_byte_anywhere_in_a_submission_is_a_400_naming_the_field(api, world, fields, field):
    response = api("alice").post("/api/v1/jobs/", {**JOB, **fields}, format="json")
    assert response.status_code == 400, response.content
    assert any(name.startswith(field.split("[")[0]) for name in response.json()["errors"]), response.json()
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/teams/%00/",
        "/api/v1/gpu-models/%00/",
        "/api/v1/priority-classes/%00/",
        "/api/v1/queues/%00/",
        "/api/v1/cluster-queues/%00/",
        "/api/v1/jobs/?team=%00",
        "/api/v1/jobs/?queue=a%00b",
        "/api/v1/cost/allocation?aggregate=label:%00",
    ],
)
def test_a_nul_byte_in_an_api_path_or_query_is_a_400_naming_where(api, world, path):
    response = api("alice").get(path)
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["errors"], body
    assert "NUL" in body["detail"]


@pytest.mark.parametrize("query", ["q=%00", "state=%00", "team=%00", "q=a%00b&state=Pending", "page=%00"])
def test_a_nul_byte_in_a_page_filter_is_a_400_naming_the_parameter(client, world, query):
    client.force_login(world.users["alice"])
    response = client.get(f"/jobs/?{query}")
    assert response.status_code == 400
    assert query.split("=")[0] in response.content.decode()


@pytest.mark.parametrize("value", [10**30, 2**63, -1, "1e30"])
@pytest.mark.parametrize("field", ["cpu_quota_milli", "memory_quota_mib"])
def test_a_quota_too_large_for_its_column_is_a_400_naming_the_field(api, world, field, value):
    response = api("admin").patch("/api/v1/cluster-queues/cq-vision/", {field: value}, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["errors"]
    cq = ClusterQueue.objects.get(name="cq-vision")
    assert getattr(cq, field) is None


def test_the_largest_quota_the_column_holds_is_accepted(api, world):
    response = api("admin").patch("/api/v1/cluster-queues/cq-vision/", {"cpu_quota_milli": 2**63 - 1}, format="json")
    assert response.status_code == 200, response.content
    assert ClusterQueue.objects.get(name="cq-vision").cpu_quota_milli == 2**63 - 1


def test_a_float_constant_json_does_not_know_is_a_400(api, world):
    response = api("alice").post("/api/v1/jobs/", data='{"gpu": NaN}', content_type="application/json")
    assert response.status_code == 400
