"""``python manage.py rundemo``: serve the portal and run the scheduler loop in the same process.

For the embedded demo (SQLite, simulated cluster, no Redis): a background thread runs the Celery
tasks in-process (the scheduling cycle every ``--interval`` seconds, every other task of the beat
schedule at its own period) while Django's development server serves the pages. In production use
docker-compose (gunicorn, a Celery worker and beat).
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta
from typing import Any

from celery import Task
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import close_old_connections

from portal.celery import app
from scheduling.tasks import scheduling_cycle_task

logger = logging.getLogger("portal.rundemo")


def beat_tasks() -> list[tuple[Task, dict, float]]:
    """Every task of the beat schedule (``CELERY_BEAT_SCHEDULE``) but the cycle, with its keyword
    arguments and its period in seconds: what beat would run in production, read from one place."""
    app.loader.import_default_modules()  # every app's tasks module, as a worker imports them
    out = []
    entries: dict[str, dict[str, Any]] = settings.CELERY_BEAT_SCHEDULE
    for entry in entries.values():
        if entry["task"] == scheduling_cycle_task.name:
            continue
        every = entry["schedule"]
        every_s = every.total_seconds() if isinstance(every, timedelta) else float(every)
        out.append((app.tasks[entry["task"]], dict(entry.get("kwargs") or {}), every_s))
    return out


def scheduler_loop(stop: threading.Event, interval_s: float) -> None:
    """Run the beat schedule's tasks in-process: the cycle every tick, the others at their own periods
    (metering, schedules, services' autoscaler, notifications, queue samples, ...: ``beat_tasks``)."""
    periodic = beat_tasks()
    last_run = [float("-inf")] * len(periodic)
    while not stop.wait(interval_s):
        close_old_connections()
        try:
            scheduling_cycle_task.apply()
        except Exception:  # keep the demo loop alive; the error is logged with its traceback
            logger.exception("scheduling cycle failed")
        for i, (task, kwargs, every_s) in enumerate(periodic):
            if time.monotonic() - last_run[i] < every_s:
                continue
            last_run[i] = time.monotonic()
            try:
                task.apply(kwargs=kwargs)
            except Exception:
                logger.exception("%s failed", task.name)


class Command(BaseCommand):
    help = "Serve the portal with an in-process scheduler loop (demo mode)."

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--interval", type=float, default=min(settings.SCHEDULER_INTERVAL_S, 3.0))

    def handle(self, *args, port: int, host: str, interval: float, **options):
        stop = threading.Event()
        thread = threading.Thread(
            target=scheduler_loop,
            args=(stop, interval),
            daemon=True,
            name="scheduler",
        )
        thread.start()
        self.stdout.write(
            f"GPU portal on http://{host}:{port}/ — log in as alice, bob or admin (password: demo). "
            f"Scheduler cycle every {interval:g} s; simulated cluster runs jobs {settings.SIM_SPEEDUP:g}× faster."
        )
        try:
            call_command("runserver", f"{host}:{port}", use_reloader=False)
        finally:
            stop.set()
