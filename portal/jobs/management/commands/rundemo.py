"""``python manage.py rundemo``: serve the portal and run the scheduler loop in the same process.

For the embedded demo (SQLite, simulated cluster, no Redis): a background thread runs the Celery
tasks in-process (the scheduling cycle every SCHEDULER_INTERVAL_S, metering every METERING_INTERVAL_S)
while Django's development server serves the pages. In production use docker-compose (gunicorn,
a Celery worker and beat).
"""

from __future__ import annotations

import logging
import threading
import time

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import close_old_connections

from billing.tasks import budget_check_task, capacity_record_task, metering_run_task
from scheduling.tasks import scheduling_cycle_task

logger = logging.getLogger("portal.rundemo")


def scheduler_loop(stop: threading.Event, interval_s: float) -> None:
    """Run the beat schedule's tasks in-process: the cycle every tick, the others at their own periods."""
    periodic = [
        (metering_run_task, settings.METERING_INTERVAL_S),
        (capacity_record_task, settings.CAPACITY_SNAPSHOT_INTERVAL_S),
        (budget_check_task, settings.BUDGET_CHECK_INTERVAL_S),
    ]
    last_run = {task.name: float("-inf") for task, _ in periodic}
    while not stop.wait(interval_s):
        close_old_connections()
        try:
            scheduling_cycle_task.apply()
            for task, every_s in periodic:
                if time.monotonic() - last_run[task.name] >= every_s:
                    task.apply()
                    last_run[task.name] = time.monotonic()
        except Exception:  # keep the demo loop alive; the error is logged with its traceback
            logger.exception("scheduler loop iteration failed")


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
