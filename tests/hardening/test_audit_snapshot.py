"""Item 5: ``manage.py audit`` reads one consistent snapshot, so a cycle committing between its
queries cannot make it report a state that never existed.

The race is made deterministic: Django's ``execute_wrapper`` (its query instrumentation hook) lets
another connection commit a real admission just before the audit's first read of the transition
history, i.e. after it has read the jobs. Without one snapshot the audit sees the job Pending and its
history ending in Admitted, a false alarm.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from django.test import TestCase
from django.utils import timezone

from scheduling.adapters.simulated import SimulatedCluster
from scheduling.invariants import audit_findings
from scheduling.services import cycle_run


def admit_from_another_connection() -> None:
    def cycle() -> None:
        try:
            with TestCase.captureOnCommitCallbacks(execute=False):
                cycle_run(now=timezone.now(), backend=SimulatedCluster())
        finally:
            connection.close()

    thread = threading.Thread(target=cycle)
    thread.start()
    thread.join()


@pytest.mark.django_db(transaction=True)
def test_the_audit_sees_no_false_alarm_when_a_cycle_commits_between_its_reads(world):
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL's snapshots")
    for _ in range(3):
        world.submit(gpu=1)
    fired: list[str] = []

    def race(execute, sql, params, many, context):
        if not fired and "jobs_jobtransition" in sql:
            fired.append(sql)
            admit_from_another_connection()  # commits while the audit is between two reads
        return execute(sql, params, many, context)

    with connection.execute_wrapper(race):
        findings = audit_findings(backend=SimulatedCluster())
    assert fired, "the race was not staged"
    assert findings == []
    assert audit_findings(backend=SimulatedCluster()) == []  # and the admitted state itself is sound
