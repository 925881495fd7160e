"""The job state machine as a table (no nested ifs): which transitions are legal.

Pending → Admitted → Running → Succeeded | Failed | Preempted | Cancelled.
A preempted or evicted job may be requeued (→ Pending); an admitted job whose pods never start may be
requeued too. Succeeded, Failed and Cancelled are final.
"""

from __future__ import annotations

from django.db import models


class JobState(models.TextChoices):
    PENDING = "Pending"
    ADMITTED = "Admitted"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    PREEMPTED = "Preempted"
    CANCELLED = "Cancelled"


TRANSITIONS: dict[str, frozenset[str]] = {
    JobState.PENDING: frozenset({JobState.ADMITTED, JobState.CANCELLED, JobState.FAILED}),
    JobState.ADMITTED: frozenset(
        {JobState.RUNNING, JobState.PENDING, JobState.PREEMPTED, JobState.FAILED, JobState.CANCELLED}
    ),
    JobState.RUNNING: frozenset(
        {JobState.SUCCEEDED, JobState.FAILED, JobState.PREEMPTED, JobState.CANCELLED, JobState.PENDING}
    ),
    JobState.PREEMPTED: frozenset({JobState.PENDING, JobState.CANCELLED}),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}

ACTIVE_STATES = frozenset({JobState.ADMITTED, JobState.RUNNING})
"""States that hold cluster capacity."""
FINAL_STATES = frozenset(s for s, nxt in TRANSITIONS.items() if not nxt)
CANCELLABLE_STATES = frozenset(s for s, nxt in TRANSITIONS.items() if JobState.CANCELLED in nxt)


class IllegalTransition(Exception):
    def __init__(self, source: str, target: str) -> None:
        super().__init__(f"a {source} job cannot become {target}")
        self.source = source
        self.target = target


def check_transition(source: str, target: str) -> None:
    if target not in TRANSITIONS[source]:
        raise IllegalTransition(source, target)
