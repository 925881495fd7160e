"""Webhook deliveries: signed JSON to a real HTTP server in the test, retried with back-off, once."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core import mail
from django.utils import timezone

from portal.jobs.errors import ServiceError
from portal.jobs.services import job_submit
from portal.notifications.models import Notification
from portal.notifications.services.delivery import (
    DeliveryFailed,
    notification_deliver,
    retry_backoff_s,
    webhook_url_problem,
)
from portal.notifications.services.events import notifications_sweep
from portal.notifications.services.preferences import preference_save, webhook_set
from scheduling import services
from scheduling.adapters.simulated import SimulatedCluster

pytestmark = pytest.mark.django_db


def _finish(world, capture):
    backend = SimulatedCluster(speedup=1.0)
    start = timezone.now() - timedelta(minutes=12)
    job = job_submit(owner=world.users["alice"], spec=world.spec(name="hooked", runtime_s=600), request_cycle=False)
    with capture(execute=True):
        services.cycle_run(now=start, backend=backend)
        services.cluster_sync(backend=backend, now=timezone.now())
    job.refresh_from_db()
    assert job.state == "Succeeded"
    return job


def test_a_webhook_gets_a_signed_json_event_retried_after_its_back_off_and_sent_once(
    world, receiver, django_capture_on_commit_callbacks
):
    alice = world.users["alice"]
    receiver.secret = webhook_set(user=alice, url=receiver.url)
    assert receiver.secret.startswith("whsec_")
    preference_save(user=alice, values={"email": False, "webhook": True, "on_succeeded": True})
    receiver.answers = [503]  # the first try fails
    job = _finish(world, django_capture_on_commit_callbacks)
    row = Notification.objects.get()
    assert (row.status, row.tries, row.last_error) == ("pending", 1, "webhook answered HTTP 503")
    assert row.next_try_at is not None
    wait_s = (row.next_try_at - timezone.now()).total_seconds()
    assert 25 < wait_s <= 30  # NOTIFY_BACKOFF_S
    # Before its time the retry does not happen; once it is (well) due, the sweep makes it.
    with django_capture_on_commit_callbacks(execute=True):
        notifications_sweep(now=timezone.now())
    assert len(receiver.deliveries) == 1
    with django_capture_on_commit_callbacks(execute=True):
        notifications_sweep(now=row.next_try_at + timedelta(minutes=3))
    assert len(receiver.deliveries) == 2
    assert all(d["signed"] for d in receiver.deliveries)
    first, second = receiver.deliveries
    assert first["headers"]["X-Portal-Delivery"] == second["headers"]["X-Portal-Delivery"] == str(row.pk)
    assert second["headers"]["X-Portal-Event"] == "job.succeeded"
    body = second["body"]
    assert (body["event"], body["job"]["id"], body["job"]["state"]) == ("job.succeeded", job.pk, "Succeeded")
    assert body["job"]["gpu_hours"] == "0.166667"  # 1 GPU for 600 s
    assert body["job"]["nodes"]
    row.refresh_from_db()
    assert (row.status, row.tries, row.last_error, row.next_try_at) == ("sent", 2, "", None)
    # Delivering again (a duplicate task, another sweep) sends nothing.
    assert notification_deliver(notification_id=row.pk) is False
    with django_capture_on_commit_callbacks(execute=True):
        notifications_sweep(now=timezone.now() + timedelta(hours=1))
    assert len(receiver.deliveries) == 2
    assert mail.outbox == []


def test_the_task_retries_a_failed_try_through_celery_with_the_back_off(world, receiver):
    from celery.exceptions import Retry

    from portal.notifications.tasks import notification_deliver_task

    alice = world.users["alice"]
    receiver.secret = webhook_set(user=alice, url=receiver.url)
    job = world.submit("vision")
    row = Notification.objects.create(
        job=job, attempt=0, event="job.failed", channel="webhook", user=alice, occurred_at=timezone.now()
    )
    receiver.answers = [502]
    # The task's body as a worker runs it (not eager): a failed try is retried by Celery after the back-off.
    with pytest.raises(Retry) as retried:
        type(notification_deliver_task._get_current_object()).run(_WorkerTask(), row.pk)
    assert retried.value.when == 30
    row.refresh_from_db()
    assert (row.tries, row.status) == (1, "pending")


class _WorkerTask:
    """The task as a worker runs it: ``request.is_eager`` false, ``retry`` as Celery's."""

    def __init__(self):
        self.request = type("Request", (), {"is_eager": False, "retries": 0})()

    def retry(self, **kwargs):
        from celery.exceptions import Retry

        return Retry(exc=kwargs.get("exc"), when=kwargs.get("countdown"))


def test_after_the_last_try_the_notification_is_failed(world, receiver, django_capture_on_commit_callbacks, settings):
    settings.NOTIFY_RETRIES = 2
    alice = world.users["alice"]
    receiver.secret = webhook_set(user=alice, url=receiver.url)
    preference_save(user=alice, values={"email": False, "webhook": True, "on_succeeded": True})
    receiver.answers = [500] * 5
    _finish(world, django_capture_on_commit_callbacks)
    row = Notification.objects.get()
    with pytest.raises(DeliveryFailed) as last:
        notification_deliver(notification_id=row.pk)
    assert last.value.final
    row.refresh_from_db()
    assert (row.status, row.tries, row.last_error) == ("failed", 2, "webhook answered HTTP 500")
    assert notification_deliver(notification_id=row.pk) is False  # failed: never sent again
    assert len(receiver.deliveries) == 2


def test_the_back_off_doubles_from_its_base_up_to_its_cap(settings):
    settings.NOTIFY_BACKOFF_S, settings.NOTIFY_BACKOFF_MAX_S = 30, 600
    assert [retry_backoff_s(n) for n in range(1, 8)] == [30, 60, 120, 240, 480, 600, 600]


def test_a_tampered_body_or_the_wrong_secret_fails_verification(world, receiver, django_capture_on_commit_callbacks):
    alice = world.users["alice"]
    webhook_set(user=alice, url=receiver.url)
    receiver.secret = "whsec_not-the-one"
    preference_save(user=alice, values={"email": False, "webhook": True, "on_succeeded": True})
    _finish(world, django_capture_on_commit_callbacks)
    assert [d["signed"] for d in receiver.deliveries] == [False]


def test_webhooks_to_the_portals_own_network_are_refused(world, settings):
    settings.NOTIFY_WEBHOOK_ALLOW_PRIVATE = False
    for url in ("http://127.0.0.1:8000/x", "http://10.1.2.3/x", "http://169.254.169.254/latest", "http://[::1]/"):
        assert "not a public address" in webhook_url_problem(url)
    assert "http:// or https://" in webhook_url_problem("ftp://example.com/x")
    with pytest.raises(ServiceError) as refused:
        webhook_set(user=world.users["alice"], url="http://localhost:9/hook")
    assert refused.value.field == "url"
