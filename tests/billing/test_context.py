"""The budget banner's context processor (``billing.context``)."""

from __future__ import annotations

import pytest

from tests.billing.conftest import over_a_hard_stop_budget


@pytest.mark.django_db
def test_the_budget_banner_context_shows_the_highest_alert_of_the_users_teams(
    world, rf, settings, django_assert_num_queries
):
    from django.template.loader import render_to_string

    from billing.context import budget_alerts

    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    over_a_hard_stop_budget(world)
    request = rf.get("/")
    request.user = world.users["alice"]
    context = budget_alerts(request)
    assert [a.threshold_pct for a in context["budget_alerts"]] == [100]
    with django_assert_num_queries(0):  # the banner is on every page: no query per alert
        html = render_to_string("billing/_budget_alerts.html", context)
    assert "new jobs will not start" in html
    request.user = world.users["bob"]
    assert budget_alerts(request)["budget_alerts"] == []
