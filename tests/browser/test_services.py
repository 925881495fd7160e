"""An inference service in a real browser: started from the form, its chart of replicas against load drawn."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from portal.serving.services import services_autoscale
from tests.browser.conftest import assert_nothing_overflows, login, screenshot

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_member_starts_a_service_and_sees_replicas_against_load(page, world, tmp_path):
    login(page, "alice")
    page.goto("/services/")
    page.fill("input[name=name]", "chat")
    page.fill("input[name=model_size_b]", "70")
    page.fill("input[name=max_replicas]", "3")
    page.click("button:text('Start')")
    page.wait_for_url("**/services/*/")
    service_id = int(page.url.rstrip("/").rsplit("/", 1)[1])
    now = timezone.now()
    for step in range(6):
        services_autoscale(now=now + timedelta(seconds=30 * step))
    page.goto(f"/services/{service_id}/")
    page.wait_for_selector(".js-plotly-plot .scatterlayer .trace")
    assert page.locator(".js-plotly-plot .scatterlayer .trace").count() == 3
    assert "140 GiB GPU memory per replica" in page.content()
    assert_nothing_overflows(page)
    screenshot(page, "service-detail", tmp_path)
