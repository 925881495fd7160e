"""Item 10: ``capacity_record`` is retried on database errors.

A real fault: another connection holds an exclusive lock on the capacity table and the task's
connection has a one-second lock timeout, so its first attempt fails with PostgreSQL's lock timeout
(an OperationalError). The lock is released half a second after that failure, while the retry
waits; the retry records the capacity.
"""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, connections

from billing.models import CapacitySnapshot
from billing.tasks import capacity_record_task


def waiting_on_a_lock(pid: int) -> bool:
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s", [pid])
        row = cursor.fetchone()
    return bool(row and row[0])


@pytest.mark.django_db(transaction=True)
def test_capacity_record_is_retried_after_a_database_error(world):
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL locks")
    table = CapacitySnapshot._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute("SET lock_timeout = '1s'")
        cursor.execute("SELECT pg_backend_pid()")
        task_pid = cursor.fetchone()[0]
    locked, failed_once = threading.Event(), threading.Event()

    def hold_the_lock_until_the_first_attempt_failed() -> None:
        try:
            with connections["default"].cursor() as cursor:
                cursor.execute("BEGIN")
                cursor.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
                locked.set()
                deadline = time.monotonic() + 20
                while not waiting_on_a_lock(task_pid) and time.monotonic() < deadline:
                    time.sleep(0.01)
                time.sleep(1.5)  # the first attempt times out after 1 s; the retry is waiting now
                failed_once.set()
                cursor.execute("COMMIT")
        finally:
            connections["default"].close()

    holder = threading.Thread(target=hold_the_lock_until_the_first_attempt_failed)
    holder.start()
    assert locked.wait(10)
    try:
        result = capacity_record_task.apply(throw=False)  # as a worker runs it: retries instead of raising
    finally:
        holder.join()
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = 0")
    assert failed_once.is_set()
    assert result.successful(), result.traceback
    assert CapacitySnapshot.objects.filter(gpu_model="A100-80GB").exists()
