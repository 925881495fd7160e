"""Who is told what: events of a job's attempts, preferences (default and per job), once per event.

Jobs go through the real control loop on the simulated cluster; mail goes to Django's test outbox."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core import mail
from django.utils import timezone

from portal.jobs.services import job_submit
from portal.notifications.models import Event, Notification, NotificationPreference
from portal.notifications.services.events import notifications_dispatch, notifications_sweep
from portal.notifications.services.preferences import preference_save
from scheduling import services
from scheduling.adapters import apply
from scheduling.adapters.simulated import SimulatedCluster
from scheduling.engine.model import Preemption

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice(world):
    user = world.users["alice"]
    user.email = "alice@example.com"
    user.save()
    return user


def _run_to_the_end(world, capture, *, runtime_s=600, **spec):
    """Submit, admit, run and finish one job on the simulated cluster (times in the recent past)."""
    backend = SimulatedCluster(speedup=1.0)
    start = timezone.now() - timedelta(seconds=runtime_s + 120)
    job = job_submit(
        owner=world.users["alice"],
        spec=world.spec(runtime_s=runtime_s, **spec),
        at=start - timedelta(minutes=30),
        request_cycle=False,
    )
    with capture(execute=True):
        services.cycle_run(now=start, backend=backend)
        services.cluster_sync(backend=backend, now=start + timedelta(seconds=1))
    with capture(execute=True):
        services.cluster_sync(backend=backend, now=timezone.now())
    job.refresh_from_db()
    return job


def test_a_finished_job_is_announced_once_by_mail_even_when_the_dispatch_runs_again(
    world, alice, django_capture_on_commit_callbacks
):
    preference_save(user=alice, values={"on_succeeded": True})
    job = _run_to_the_end(world, django_capture_on_commit_callbacks, name="resnet")
    assert job.state == "Succeeded"
    assert len(mail.outbox) == 1
    message = mail.outbox[0]
    assert message.to == ["alice@example.com"]
    assert message.subject == f"[GPU portal] Job {job.pk} (resnet) finished"
    assert f"/jobs/{job.pk}/" in message.body
    assert "cost: $" in message.body
    # A retried task, a second dispatch and the sweep insert and send nothing new.
    with django_capture_on_commit_callbacks(execute=True):
        assert notifications_dispatch(job_ids=[job.pk]) == 0
        notifications_sweep()
    assert len(mail.outbox) == 1
    row = Notification.objects.get(event=Event.SUCCEEDED)
    assert (row.status, row.tries, row.attempt, row.channel) == ("sent", 1, 1, "email")


def test_without_a_choice_failures_and_preemptions_are_mailed_but_not_finishes(
    world, alice, django_capture_on_commit_callbacks
):
    job = _run_to_the_end(world, django_capture_on_commit_callbacks)
    assert job.state == "Succeeded"
    assert mail.outbox == []  # finishing is not announced by default
    backend = SimulatedCluster(speedup=1.0)
    victim = job_submit(owner=alice, spec=world.spec(runtime_s=3600), request_cycle=False)
    with django_capture_on_commit_callbacks(execute=True):
        services.cycle_run(now=timezone.now(), backend=backend)
        services.cluster_sync(backend=backend, now=timezone.now())
    with django_capture_on_commit_callbacks(execute=True):
        apply.preemption_apply(
            Preemption(str(victim.pk), "", "preempted by job 7"), now=timezone.now(), backend=backend
        )
        from portal.notifications.services.notify import job_events_notify

        job_events_notify(job_ids=[victim.pk])  # what cycle_run does after applying a plan
    assert [m.subject for m in mail.outbox] == [f"[GPU portal] Job {victim.pk} preempted or evicted"]


def test_a_jobs_own_choice_overrides_the_default(world, alice, django_capture_on_commit_callbacks):
    preference_save(user=alice, values={"on_succeeded": True})
    backend = SimulatedCluster(speedup=1.0)
    quiet = job_submit(owner=alice, spec=world.spec(runtime_s=60), request_cycle=False)
    preference_save(user=alice, job=quiet, values={"email": False})
    start = timezone.now() - timedelta(minutes=5)
    with django_capture_on_commit_callbacks(execute=True):
        services.cycle_run(now=start, backend=backend)
        services.cluster_sync(backend=backend, now=timezone.now())
    quiet.refresh_from_db()
    assert quiet.state == "Succeeded"
    assert mail.outbox == []
    assert NotificationPreference.objects.filter(job=quiet).exists()


def test_a_start_after_a_long_wait_is_announced_only_past_the_chosen_minutes(
    world, alice, django_capture_on_commit_callbacks
):
    preference_save(user=alice, values={"started_after_wait_min": 20})
    backend = SimulatedCluster(speedup=1.0)
    now = timezone.now()
    waited = job_submit(
        owner=alice, spec=world.spec(name="waited"), at=now - timedelta(minutes=25), request_cycle=False
    )
    quick = job_submit(owner=alice, spec=world.spec(name="quick"), at=now - timedelta(minutes=5), request_cycle=False)
    with django_capture_on_commit_callbacks(execute=True):
        services.cycle_run(now=now, backend=backend)
        services.cluster_sync(backend=backend, now=now + timedelta(seconds=1))
    assert [m.subject for m in mail.outbox] == [f"[GPU portal] Job {waited.pk} (waited) started after a long wait"]
    assert not Notification.objects.filter(job=quick).exists()


def test_old_events_are_not_announced(world, alice, django_capture_on_commit_callbacks, settings):
    settings.NOTIFY_MAX_AGE_S = 60
    preference_save(user=alice, values={"on_succeeded": True})
    job = _run_to_the_end(world, django_capture_on_commit_callbacks, runtime_s=600)
    assert job.state == "Succeeded"
    assert mail.outbox == []  # it ended 2 minutes ago, past the 60 s limit


def test_a_user_without_an_address_gets_no_mail_and_no_row(world, django_capture_on_commit_callbacks):
    preference_save(user=world.users["alice"], values={"on_succeeded": True})
    _run_to_the_end(world, django_capture_on_commit_callbacks)
    assert mail.outbox == []
    assert not Notification.objects.exists()
