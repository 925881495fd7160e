"""Celery tasks: thin wrappers that call one billing service each (scheduled by Celery beat).

Each imports its service inside the function (the Django convention; see ``scheduling.tasks``).
"""

from __future__ import annotations

from celery import shared_task
from django.db import InterfaceError, OperationalError


@shared_task(
    name="billing.tasks.metering_run",
    ignore_result=True,
    autoretry_for=(OperationalError,),
    retry_backoff=True,
    max_retries=3,
)
def metering_run_task() -> None:
    from billing import services

    services.metering_run()


@shared_task(
    name="billing.tasks.capacity_record",
    ignore_result=True,
    # A lost connection or a lock timeout is transient: retried with back-off like the other tasks
    # (a capacity change that is not recorded bills idle GPUs at the old capacity).
    autoretry_for=(OperationalError, InterfaceError),
    retry_backoff=True,
    retry_jitter=True,
    max_retries=5,
)
def capacity_record_task() -> None:
    from billing import services

    services.capacity_record()


@shared_task(
    name="billing.tasks.budget_check",
    ignore_result=True,
    autoretry_for=(OperationalError,),
    retry_backoff=True,
    max_retries=3,
)
def budget_check_task() -> None:
    from billing import services

    services.budget_check()


@shared_task(
    name="billing.tasks.idle_check",
    ignore_result=True,
    autoretry_for=(OperationalError, InterfaceError),
    retry_backoff=True,
    max_retries=3,
)
def idle_check_task() -> None:
    """Flag (and stop, per queue policy) jobs whose GPUs stay idle (``billing.services.idle``)."""
    from billing.services.idle import idle_check

    idle_check()
