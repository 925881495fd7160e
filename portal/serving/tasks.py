"""Beat's entry to inference services: one autoscaler pass (safe from two beats: a row lock per service)."""

from __future__ import annotations

from celery import shared_task
from django.db import InterfaceError, OperationalError


@shared_task(
    bind=True,
    name="portal.serving.tasks.services_autoscale",
    ignore_result=True,
    acks_late=True,
    reject_on_worker_lost=True,
    max_retries=3,
)
def services_autoscale_task(self) -> None:
    from portal.serving.services import services_autoscale

    try:
        services_autoscale()
    except (OperationalError, InterfaceError) as exc:
        raise self.retry(exc=exc, countdown=min(60, 2 ** (self.request.retries + 1))) from exc
