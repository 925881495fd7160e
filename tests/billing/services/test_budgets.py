"""Budget writes (``billing.services.budgets``): alerts at 80 % and 100 % (portal and mail, once each),
and the hard stop's hold in the scheduler."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core import mail
from django.core.mail.backends.base import BaseEmailBackend

from billing.models import Budget, BudgetAlert
from billing.selectors.budgets import teams_over_budget
from billing.services.budgets import budget_check
from portal.jobs.models import Job
from portal.jobs.states import JobState
from tests.billing.conftest import a100_price, spend_this_month


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
