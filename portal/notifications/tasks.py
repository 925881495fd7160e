"""Celery tasks for notifications: thin wrappers, each calling one service imported inside the function
(the Django convention; see ``scheduling.tasks``)."""

from __future__ import annotations

from celery import shared_task
from django.db import InterfaceError, OperationalError

DB_ERRORS = (OperationalError, InterfaceError)


@shared_task(
    name="portal.notifications.tasks.job_events",
    ignore_result=True,
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=DB_ERRORS,
    retry_backoff=True,
    max_retries=5,
)
def job_events_task(job_ids: list[int]) -> None:
    from portal.notifications.services import events

    events.notifications_dispatch(job_ids=job_ids)


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


@shared_task(name="portal.notifications.tasks.sweep", ignore_result=True, autoretry_for=DB_ERRORS, max_retries=3)
def notifications_sweep_task() -> None:
    from portal.notifications.services import events

    events.notifications_sweep()
