"""Start a what-if run: validate the change, record the run and enqueue its replay.

Apart from ``portal.whatif.services`` so the task module (which calls ``services.whatif_run``) and the
module that enqueues the task do not import each other."""

from __future__ import annotations

from datetime import datetime, timedelta
from functools import partial

from django.db import transaction
from django.utils import timezone

from portal.jobs.errors import ServiceError
from portal.whatif.models import WhatIfRun
from portal.whatif.services import MAX_WINDOW, changes_validate
from portal.whatif.tasks import whatif_run_task
from scheduling.adapters.orm import queues_load
from scheduling.engine import model as m


def whatif_start(*, user, changes: object, window_from: datetime, window_to: datetime) -> WhatIfRun:
    """Validate and record a what-if run, and enqueue its replay once the row is committed."""
    if window_to <= window_from:
        raise ServiceError("must be after the window's start", field="window_to")
    if window_to - window_from > MAX_WINDOW:
        raise ServiceError(f"a window is at most {MAX_WINDOW.days} days", field="window_from")
    if window_to > timezone.now() + timedelta(minutes=1):
        raise ServiceError("history ends now: the window cannot end in the future", field="window_to")
    cluster_queues, local_queues = queues_load()
    queues = m.Snapshot(nodes=(), cluster_queues=cluster_queues, local_queues=local_queues, workloads=())
    clean = changes_validate(changes, user=user, base=queues)
    run = WhatIfRun.objects.create(created_by=user, window_from=window_from, window_to=window_to, changes=clean)
    transaction.on_commit(partial(whatif_run_task.delay, run.pk))
    return run
