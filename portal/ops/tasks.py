"""Celery tasks of platform operations (thin: each calls one service)."""

from __future__ import annotations

from celery import shared_task
from django.db import InterfaceError, OperationalError


@shared_task(
    name="portal.ops.tasks.queue_sample",
    ignore_result=True,
    autoretry_for=(OperationalError, InterfaceError),
    retry_backoff=True,
    max_retries=3,
)
def queue_sample_task() -> None:
    from portal.ops import services

    services.queue_sample_record()
