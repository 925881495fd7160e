"""The cost API (``billing.api.views``): authentication, parameter errors, CSV, budgets."""

from __future__ import annotations

import csv
import io
from decimal import Decimal

import pytest

from billing.models import Budget
from billing.services import metering_run
from tests.billing.conftest import OCTOBER, Run, a100_price, get_json, run_job, spend_this_month, utc


@pytest.mark.django_db
def test_anonymous_requests_are_refused(client):
    assert client.get("/api/v1/cost/allocation").status_code in (401, 403)


@pytest.mark.django_db
def test_bad_parameters_answer_400_with_the_reason(world, api):
    response = api("alice").get("/api/v1/cost/allocation", {"window": "7d", "step": "90m"})
    assert response.status_code == 400
    assert "whole hours" in response.content.decode()
    response = api("alice").get("/api/v1/cost/allocation", {"aggregate": "pod"})
    assert response.status_code == 400


@pytest.mark.django_db
@pytest.mark.parametrize(
    "params",
    [
        {"window": "1000000d"},
        {"window": "99999999999999,1"},
        {"window": "9999-12-31T23:30:00Z,9999-12-31T23:50:00Z"},
        {"window": "7d", "step": "0h"},
        {"window": "7d", "step": "999999w"},
    ],
)
def test_windows_and_steps_out_of_range_answer_400_not_500(world, api, params):
    response = api("alice").get("/api/v1/cost/allocation", params)
    assert response.status_code == 400, response.content


@pytest.mark.django_db
def test_a_step_longer_than_what_is_left_of_a_window_at_the_end_of_time_is_one_step(world, api):
    body = get_json(api("alice"), window="9999-12-30T00:00:00Z,9999-12-31T00:00:00Z", step="1w")
    assert len(body["data"]) == 1


@pytest.mark.django_db
def test_the_allocation_as_csv(world, api):
    run_job(world, gpu=0, gpu_milli=500, runs=[Run(utc(2026, 10, 2), utc(2026, 10, 2, 4))])
    metering_run()
    for response in (
        api("alice").get("/api/v1/cost/allocation", {"window": OCTOBER, "step": "1d", "format": "csv"}),
        api("alice").get("/api/v1/cost/allocation.csv", {"window": OCTOBER, "step": "1d"}),
    ):
        assert response.status_code == 200
        assert response["Content-Type"].startswith("text/csv")
        rows = list(csv.DictReader(io.StringIO(response.content.decode())))
        assert [(r["window_start"], r["name"], r["gpu_hours"]) for r in rows] == [
            ("2026-10-02T00:00:00Z", "team-vision", "2.0")
        ]


@pytest.mark.django_db
def test_budgets_api_shows_spend_against_budget(world, api):
    Budget.objects.create(team=world.teams["vision"], monthly_gpu_usd=10 * a100_price(), hard_stop=True)
    Budget.objects.create(team=world.teams["nlp"], monthly_gpu_usd=Decimal(1000))
    spend_this_month(world, gpu_hours=5)
    results = api("alice").get("/api/v1/cost/budgets").json()["results"]
    assert len(results) == 1
    assert results[0]["team"] == "vision"
    assert results[0]["used_pct"] == pytest.approx(50.0, abs=0.1)
    assert results[0]["blocked"] is False
    assert len(api("admin").get("/api/v1/cost/budgets").json()["results"]) == 2
