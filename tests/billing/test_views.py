"""Cost pages (``billing.views``): the dashboard with its plotly charts and a team's monthly invoice
(HTML and CSV)."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.models import PriceBookEntry
from billing.services import metering_run
from tests.billing.conftest import Run, over_a_hard_stop_budget, run_job, utc


@pytest.mark.django_db
def test_the_cost_dashboard_shows_charts_budgets_and_advice(world, logged_in, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    over_a_hard_stop_budget(world)
    page = logged_in("alice").get("/cost/?window=7d")
    assert page.status_code == 200
    html = page.content.decode()
    for text in ("GPU-hours per namespace", "Cost per namespace", "By GPU model", "GPU efficiency", "team-vision"):
        assert text in html
    assert "new jobs blocked" in html
    assert "100 % of its monthly GPU budget" in html
    assert "team-nlp" not in html  # alice is not in nlp
    assert "Idle and allocated GPU capacity" not in html  # the cluster's idle capacity is for admins


@pytest.mark.django_db
def test_platform_admins_see_idle_capacity_on_the_dashboard(world, logged_in):
    from billing.services import capacity_record
    from scheduling.adapters.simulated import SimulatedCluster

    capacity_record(now=timezone.now() - timedelta(days=2), backend=SimulatedCluster())
    html = logged_in("admin").get("/cost/?window=24h").content.decode()
    assert "Idle and allocated GPU capacity" in html
    assert "__idle__" in html


@pytest.mark.django_db
def test_a_team_invoice_in_html_and_csv(world, logged_in):
    run_job(world, gpu=2, runs=[Run(utc(2026, 10, 2), utc(2026, 10, 2, 3), "A100-80GB", "spot")])
    run_job(world, gpu=0, gpu_milli=500, runs=[Run(utc(2026, 10, 9), utc(2026, 10, 9, 2), "T4", "spot")])
    metering_run()
    client = logged_in("alice")
    assert client.get("/cost/invoice/vision/2026-10/").status_code == 200
    response = client.get("/cost/invoice/vision/2026-10.csv")
    assert response.status_code == 200
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    lines = {(r["gpu_model"], r["capacity_type"]): r for r in rows if r["gpu_model"] != "total"}
    assert Decimal(lines[("A100-80GB", "spot")]["gpu_hours"]) == 6
    assert Decimal(lines[("T4", "spot")]["gpu_hours"]) == 1
    spot = PriceBookEntry.objects.get(resource="gpu", gpu_model="A100-80GB", capacity_type="spot").usd_per_hour
    assert Decimal(lines[("A100-80GB", "spot")]["gpu_cost_usd"]) == 6 * spot
    total = next(r for r in rows if r["gpu_model"] == "total")["total_cost_usd"]
    assert Decimal(total) == sum(Decimal(r["total_cost_usd"]) for r in lines.values())


@pytest.mark.django_db
def test_another_teams_invoice_is_not_found(world, logged_in):
    assert logged_in("bob").get("/cost/invoice/vision/2026-10/").status_code == 404
    assert logged_in("admin").get("/cost/invoice/vision/2026-10/").status_code == 200


@pytest.mark.django_db
@pytest.mark.parametrize("month", ["2026-13", "0-1", "9999-12"])
def test_an_invoice_for_a_month_that_cannot_exist_is_not_found(world, logged_in, month):
    client = logged_in("alice")
    assert client.get(f"/cost/invoice/vision/{month}/").status_code == 404
    assert client.get(f"/cost/invoice/vision/{month}.csv").status_code == 404
