"""Beat's entry to job schedules: fire what is due. Safe to run from two beats at once (the service's
row lock and unique run key make each instant start one job)."""

from __future__ import annotations

from celery import shared_task
from django.db import InterfaceError, OperationalError


@shared_task(
    bind=True,
    name="portal.schedules.tasks.schedules_fire",
    ignore_result=True,
    acks_late=True,
    reject_on_worker_lost=True,
    max_retries=3,
)
def schedules_fire_task(self) -> None:
    from portal.api.job_create import job_spec_from_body
    from portal.schedules.services import schedules_fire

    try:
        schedules_fire(spec_of=job_spec_from_body)
    except (OperationalError, InterfaceError) as exc:
        raise self.retry(exc=exc, countdown=min(60, 2 ** (self.request.retries + 1))) from exc
