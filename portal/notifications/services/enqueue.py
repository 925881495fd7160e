"""Enqueue a notification task best effort: with the broker down the notification sweep sends it."""

from __future__ import annotations

import logging

from portal.jobs.errors import BROKER_ERRORS

logger = logging.getLogger(__name__)


def task_enqueue(task, **kwargs) -> None:
    try:
        task.delay(**kwargs)
    except BROKER_ERRORS as exc:
        logger.warning("could not enqueue %s (%s); the notification sweep will", task.name, exc)
