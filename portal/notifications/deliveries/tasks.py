"""The notification delivery task, apart from ``tasks`` so the events service can enqueue it without
importing the module whose tasks call that service. Its name stays ``portal.notifications.tasks.deliver``."""

from __future__ import annotations

from celery import shared_task
from django.db import InterfaceError, OperationalError

DB_ERRORS = (OperationalError, InterfaceError)


@shared_task(
    bind=True,
    name="portal.notifications.tasks.deliver",
    ignore_result=True,
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=DB_ERRORS,
    retry_backoff=True,
)
def notification_deliver_task(self, notification_id: int) -> None:
    from portal.notifications.services import delivery

    try:
        delivery.notification_deliver(notification_id=notification_id)
    except delivery.DeliveryFailed as exc:
        if exc.final or self.request.is_eager:
            return  # failed for good; or no worker to wait in (eager): the sweep retries at next_try_at
        tries = self.request.retries + 1
        raise self.retry(exc=exc, countdown=delivery.retry_backoff_s(tries), max_retries=None) from exc
