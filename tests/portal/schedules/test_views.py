import pytest

from portal.schedules.models import JobSchedule

pytestmark = pytest.mark.django_db
FORM = {
    "name": "nightly-eval",
    "cron": "0 2 * * *",
    "timezone": "Europe/Berlin",
    "concurrency_policy": "forbid",
    "queue": "vision/default",
    "image": "nvcr.io/nvidia/pytorch:24.08-py3",
    "command": "python eval.py",
    "gpu": "1",
    "runtime_s": "3600",
    "off_peak": "on",
}


def test_a_schedule_is_added_from_the_page_and_a_bad_one_names_the_field(client, world):
    client.force_login(world.users["alice"])
    bad = client.post("/schedules/", {**FORM, "cron": "0 2 * *"})
    assert bad.status_code == 400
    assert "does not have five fields" in bad.content.decode()
    bad = client.post("/schedules/", {**FORM, "timezone": "Mars/Base"})
    assert "is not an IANA time zone" in bad.content.decode()
    created = client.post("/schedules/", FORM)
    assert created.status_code == 302, created.content.decode()[:2000]
    schedule = JobSchedule.objects.get()
    assert (schedule.timezone, schedule.concurrency_policy, schedule.job["off_peak"]) == (
        "Europe/Berlin",
        "forbid",
        True,
    )
    page = client.get("/schedules/").content.decode()
    assert "<td>nightly-eval</td>" in page
    assert "<code>0 2 * * *</code>" in page
    client.force_login(world.users["bob"])
    assert "<td>nightly-eval" not in client.get("/schedules/").content.decode()
