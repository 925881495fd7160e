from __future__ import annotations

from celery import shared_task

from billing.services import metering_run as metering_run_service


@shared_task(name="billing.tasks.metering_run", ignore_result=True)
def metering_run() -> None:
    metering_run_service()
