"""The notification settings page and a job's own choice."""

from __future__ import annotations

import re

import pytest

from portal.notifications.models import NotificationPreference, WebhookEndpoint

pytestmark = pytest.mark.django_db


def test_a_user_sets_a_default_an_address_and_a_webhook_whose_secret_is_shown_once(client, world, settings):
    settings.NOTIFY_WEBHOOK_ALLOW_PRIVATE = True
    alice = world.users["alice"]
    client.force_login(alice)
    page = client.get("/account/notifications/").content.decode()
    assert "Your default" in page
    saved = client.post(
        "/account/notifications/",
        {"action": "preferences", "address": "alice@example.com", "email": "on", "on_succeeded": "on",
         "on_failed": "on", "started_after_wait_min": "15"},
    )  # fmt: skip
    assert saved.status_code == 302
    preference = NotificationPreference.objects.get(user=alice, job=None)
    assert (preference.on_succeeded, preference.on_preempted, preference.started_after_wait_min) == (True, False, 15)
    alice.refresh_from_db()
    assert alice.email == "alice@example.com"
    made = client.post("/account/notifications/", {"action": "webhook", "url": "http://127.0.0.1:9/hook"})
    secret = WebhookEndpoint.objects.get(user=alice).secret
    assert secret in made.content.decode()
    again = client.get("/account/notifications/").content.decode()
    assert secret not in again
    assert secret[:10] in again
    rotated = client.post("/account/notifications/", {"action": "rotate"}).content.decode()
    new = WebhookEndpoint.objects.get(user=alice).secret
    assert new != secret
    assert new in rotated


def test_a_webhook_on_a_private_address_is_a_400_naming_the_url(client, world, settings):
    settings.NOTIFY_WEBHOOK_ALLOW_PRIVATE = False
    client.force_login(world.users["alice"])
    response = client.post("/account/notifications/", {"action": "webhook", "url": "http://127.0.0.1:9/hook"})
    assert response.status_code == 400
    assert "not a public address" in response.content.decode()
    assert not WebhookEndpoint.objects.exists()


def test_only_the_owner_chooses_a_jobs_notifications(client, world):
    job = world.submit("vision")  # alice's
    client.force_login(world.users["carol"])  # in the team, not the owner
    assert client.get(f"/jobs/{job.pk}/notifications/").status_code == 404
    client.force_login(world.users["alice"])
    assert "follows" in client.get(f"/jobs/{job.pk}/notifications/").content.decode()
    response = client.post(f"/jobs/{job.pk}/notifications/", {"action": "job", "webhook": "on", "on_failed": "on"})
    assert response.status_code == 302
    own = NotificationPreference.objects.get(job=job)
    assert (own.email, own.webhook, own.on_failed) == (False, True, True)
    client.post(f"/jobs/{job.pk}/notifications/", {"action": "default"})
    assert not NotificationPreference.objects.filter(job=job).exists()


def test_one_users_job_choice_never_changes_the_default_of_users_who_chose_nothing(client, world):
    job = world.submit("vision")  # alice's; alice has no saved default
    client.force_login(world.users["alice"])
    client.post(f"/jobs/{job.pk}/notifications/", {"action": "job", "webhook": "on", "on_succeeded": "on"})
    client.force_login(world.users["carol"])  # chose nothing: e-mail on failure and preemption
    page = client.get("/account/notifications/").content.decode()
    checked = {name: _checked(page, name) for name in ("email", "webhook", "on_failed", "on_preempted", "on_succeeded")}
    assert checked == {"email": True, "webhook": False, "on_failed": True, "on_preempted": True, "on_succeeded": False}


def _checked(page: str, name: str) -> bool:
    tag = re.search(rf'<input[^>]*name="{name}"[^>]*>', page)
    assert tag is not None, name
    return " checked" in tag.group(0)
