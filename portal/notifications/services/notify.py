"""Tell job owners what just happened to their jobs: enqueue the events task after the caller's commit
(``events.notifications_dispatch`` runs in it). Apart from ``events``, which that task calls."""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial

from django.db import transaction

from portal.notifications.services.enqueue import task_enqueue
from portal.notifications.tasks import job_events_task


def job_events_notify(*, job_ids: Iterable[int]) -> None:
    """Tell the owners of these jobs about what just happened to them, once the caller's transaction
    commits (best effort: with the broker down, the periodic sweep sends them)."""
    ids = sorted(set(job_ids))
    if ids:
        # robust: an error while enqueueing (or, with eager tasks, while sending) is logged, never
        # raised into the cycle that committed the transitions.
        transaction.on_commit(partial(task_enqueue, job_events_task, job_ids=ids), robust=True)
