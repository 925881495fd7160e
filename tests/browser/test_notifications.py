"""The notification settings page in a real browser: a default saved, a webhook set with its secret
shown once."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from portal.notifications.models import NotificationPreference, WebhookEndpoint
from tests.browser.conftest import assert_nothing_overflows, login, screenshot

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_user_chooses_notifications_and_sees_the_webhook_secret_once(page, world, settings, tmp_path):
    settings.NOTIFY_WEBHOOK_ALLOW_PRIVATE = True
    login(page, "alice")
    page.get_by_role("link", name="Notifications").click()
    page.get_by_label("E-mail address").fill("alice@example.com")
    page.get_by_label("when it finishes").check()
    page.get_by_label("when it starts after waiting more than (minutes)").fill("30")
    page.get_by_role("button", name="Save").click()
    expect(page.locator(".messages")).to_contain_text("Notification settings saved.")
    preference = NotificationPreference.objects.get(user=world.users["alice"], job=None)
    assert (preference.on_succeeded, preference.started_after_wait_min) == (True, 30)
    page.get_by_label("Webhook URL").fill("http://127.0.0.1:9/hooks/gpu")
    page.get_by_role("button", name="Set webhook").click()
    secret = WebhookEndpoint.objects.get(user=world.users["alice"]).secret
    expect(page.locator("#webhook-secret")).to_have_text(secret)
    assert_nothing_overflows(page)
    screenshot(page, "notification-settings", tmp_path)
    page.reload()
    expect(page.locator("#webhook-secret")).to_have_count(0)
    assert secret not in page.content()


def test_the_submit_form_offers_only_the_mig_profiles_of_the_ticked_gpu_models(page, world, tmp_path):
    login(page, "alice")
    page.goto("/jobs/new/")
    options = page.locator("#id_mig_profile option")
    expect(options).to_have_count(7)  # none + the six profiles of the A100-80GB
    page.get_by_label("T4").check()  # T4 alone: no MIG
    expect(options).to_have_count(1)
    page.get_by_label("A100-80GB").check()
    expect(options).to_have_count(7)
    expect(page.locator("#id_mig_profile")).to_contain_text("3g.40gb (A100-80GB)")
    screenshot(page, "submit-form-mig", tmp_path)
