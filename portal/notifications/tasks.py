"""Celery tasks for notifications: thin wrappers, each calling one service imported inside the function
(the Django convention; see ``scheduling.tasks``)."""

from __future__ import annotations

from celery import shared_task

from portal.notifications.deliveries.tasks import DB_ERRORS, notification_deliver_task

# The delivery task lives in ``portal.notifications.deliveries.tasks`` (the events service enqueues it,
# and this module's tasks call that service); imported here so the worker's autodiscovery registers it.
__all__ = ["job_events_task", "notification_deliver_task", "notifications_sweep_task"]


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


@shared_task(name="portal.notifications.tasks.sweep", ignore_result=True, autoretry_for=DB_ERRORS, max_retries=3)
def notifications_sweep_task() -> None:
    from portal.notifications.services import events

    events.notifications_sweep()
