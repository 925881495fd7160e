"""Celery tasks: thin wrappers that call one service each."""

from __future__ import annotations

from celery import shared_task

from scheduling.services import cycle_run


@shared_task(name="scheduling.tasks.scheduling_cycle", ignore_result=True)
def scheduling_cycle() -> None:
    cycle_run()
