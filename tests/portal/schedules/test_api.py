import pytest

BODY = {"queue": "default", "image": "nvcr.io/nvidia/pytorch:24.08-py3", "gpu": 1}


@pytest.mark.django_db
def test_a_schedule_is_created_listed_paused_and_deleted(api):
    alice = api("alice")
    created = alice.post(
        "/api/v1/schedules/",
        {"name": "nightly-eval", "cron": "0 2 * * *", "timezone": "Europe/Berlin", "job": BODY},
        format="json",
    )
    assert created.status_code == 201, created.json()
    body = created.json()
    assert (body["team"], body["queue"], body["cron"], body["enabled"]) == ("vision", "default", "0 2 * * *", True)
    assert body["next_run_at"].endswith(("T01:00:00Z", "T00:00:00Z"))
    assert [s["name"] for s in alice.get("/api/v1/schedules/").json()["results"]] == ["nightly-eval"]
    paused = alice.patch(f"/api/v1/schedules/{body['id']}/", {"enabled": False}, format="json")
    assert (paused.status_code, paused.json()["enabled"], paused.json()["next_run_at"]) == (200, False, None)
    assert alice.get(f"/api/v1/schedules/{body['id']}/runs/").json() == []
    assert alice.delete(f"/api/v1/schedules/{body['id']}/").status_code == 204


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "x", "cron": "0 2 * *", "job": BODY}, "cron"),
        ({"name": "x", "cron": "0 2 30 2 *", "job": BODY}, "cron"),
        ({"name": "x", "cron": "0 2 * * *", "timezone": "Nowhere/Town", "job": BODY}, "timezone"),
        ({"name": "x", "cron": "0 2 * * *", "job": {**BODY, "gpu": 1, "gpu_milli": 500}}, "job.gpu_milli"),
        ({"name": "x", "cron": "0 2 * * *", "job": {**BODY, "colour": "red"}}, "job.colour"),
        ({"name": "Bad Name", "cron": "0 2 * * *", "job": BODY}, "name"),
        ({"name": "x", "cron": "0 2 * * *", "job": BODY, "every": "day"}, "every"),
    ],
)
def test_a_bad_schedule_is_a_400_naming_the_field(api, body, field):
    response = api("alice").post("/api/v1/schedules/", body, format="json")
    assert response.status_code == 400, response.json()
    assert field in response.json()["errors"]


@pytest.mark.django_db
def test_another_teams_schedule_is_not_found(api):
    created = api("alice").post("/api/v1/schedules/", {"name": "x", "cron": "0 2 * * *", "job": BODY}, format="json")
    schedule_id = created.json()["id"]
    assert api("bob").get(f"/api/v1/schedules/{schedule_id}/").status_code == 404
    assert api("bob").delete(f"/api/v1/schedules/{schedule_id}/").status_code == 404
