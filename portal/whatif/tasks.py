"""The what-if replay as a Celery task (thin: one service call; see ``scheduling.tasks``)."""

from __future__ import annotations

from celery import shared_task
from django.db import OperationalError


@shared_task(
    name="portal.whatif.tasks.whatif_run",
    ignore_result=True,
    autoretry_for=(OperationalError,),
    retry_backoff=True,
    max_retries=3,
)
def whatif_run_task(run_id: int) -> None:
    from portal.whatif import services

    services.whatif_run(run_id=run_id)
