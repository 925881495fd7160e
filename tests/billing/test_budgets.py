"""Budgets: alerts at 80 % and 100 % (portal and mail, once each), and the hard stop in the scheduler."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core import mail
from django.core.mail.backends.base import BaseEmailBackend
from django.utils import timezone

from billing.models import Budget, BudgetAlert, PriceBookEntry
from billing.selectors import month_gpu_spend, teams_over_budget
from billing.services import budget_check, metering_run
from portal.jobs.models import Job
from portal.jobs.states import JobState
from tests.billing.conftest import Run, run_job


def a100_price() -> Decimal:
    return PriceBookEntry.objects.get(resource="gpu", gpu_model="A100-80GB", capacity_type="on-demand").usd_per_hour


def spend_this_month(world, *, gpu_hours: int, team: str = "vision") -> None:
    now = timezone.now()
    start = max(now.replace(day=1, hour=0, minute=0, second=0, microsecond=0), now - timedelta(hours=3))
    run_job(world, team=team, gpu=gpu_hours, runs=[Run(start, start + timedelta(hours=1))])
    metering_run()


@pytest.fixture
def _locmem_mail(settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"


@pytest.mark.django_db
@pytest.mark.usefixtures("_locmem_mail")
def test_alerts_at_80_and_100_percent_are_raised_and_mailed_once(world):
    world.users["alice"].email = "alice@example.org"
    world.users["alice"].save()
    budget = Budget.objects.create(
        team=world.teams["vision"], monthly_gpu_usd=10 * a100_price(), alert_emails="finance@example.org"
    )
    spend_this_month(world, gpu_hours=8)  # 80 %
    assert [a.threshold_pct for a in budget_check()] == [80]
    assert len(mail.outbox) == 1
    assert sorted(mail.outbox[0].to) == ["alice@example.org", "finance@example.org"]
    assert "80 %" in mail.outbox[0].subject
    assert budget_check() == []  # once per month and threshold
    assert len(mail.outbox) == 1

    spend_this_month(world, gpu_hours=2)  # 100 %
    assert [a.threshold_pct for a in budget_check()] == [100]
    assert len(mail.outbox) == 2
    alert = BudgetAlert.objects.get(threshold_pct=100)
    assert alert.spend_usd == (10 * a100_price()).quantize(Decimal("0.01"))
    assert alert.budget_usd == budget.monthly_gpu_usd
    # Without a hard stop nothing is blocked.
    assert teams_over_budget() == ()


class SmtpDown(BaseEmailBackend):
    def send_messages(self, email_messages):
        raise ConnectionRefusedError("smtp down")


@pytest.mark.django_db
def test_an_alert_whose_mail_failed_is_raised_and_mailed_again_by_the_next_check(world, settings):
    Budget.objects.create(
        team=world.teams["vision"], monthly_gpu_usd=10 * a100_price(), alert_emails="finance@example.org"
    )
    spend_this_month(world, gpu_hours=8)  # 80 %
    settings.EMAIL_BACKEND = f"{__name__}.SmtpDown"
    with pytest.raises(ConnectionRefusedError):
        budget_check()
    assert BudgetAlert.objects.count() == 0
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    assert [a.threshold_pct for a in budget_check()] == [80]
    assert [m.to for m in mail.outbox] == [["finance@example.org"]]
    assert BudgetAlert.objects.get().emailed_to == "finance@example.org"


@pytest.mark.django_db
def test_month_spend_counts_running_jobs_up_to_now(world):
    now = timezone.now()
    start = max(now.replace(day=1, hour=0, minute=0, second=0, microsecond=0), now - timedelta(hours=2))
    run_job(world, gpu=1, runs=[Run(start, None)])
    spend = month_gpu_spend(team_ids=[world.teams["vision"].pk], now=now)[world.teams["vision"].pk]
    hours = Decimal((now - start).total_seconds()) / 3600
    assert spend == pytest.approx(hours * a100_price(), abs=Decimal("0.0001"))


@pytest.mark.django_db
def test_the_hard_stop_keeps_new_jobs_of_a_team_over_budget_pending_with_a_budget_reason(world):
    from scheduling.adapters.simulated import SimulatedCluster
    from scheduling.services import cycle_run

    Budget.objects.create(team=world.teams["vision"], monthly_gpu_usd=Decimal("1.00"), hard_stop=True)
    spend_this_month(world, gpu_hours=1)
    blocked = teams_over_budget()
    assert [slug for slug, _ in blocked] == ["vision"]
    assert "monthly GPU budget reached" in blocked[0][1]

    budget_check()  # the budget check holds the team; the cycle reads the hold

    vision_job = world.submit("vision", gpu=1)
    nlp_job = world.submit("nlp", owner="bob", gpu=1)
    cycle_run(backend=SimulatedCluster())
    vision_job = Job.objects.get(pk=vision_job.pk)
    assert vision_job.state == JobState.PENDING
    assert vision_job.pending_reason["kind"] == "budget"
    assert "monthly GPU budget reached" in vision_job.pending_reason["message"]
    assert Job.objects.get(pk=nlp_job.pk).state in (JobState.ADMITTED, JobState.RUNNING)


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
