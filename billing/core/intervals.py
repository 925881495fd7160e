"""Running intervals from job histories: the one builder, used by metering, by the cost of running jobs
and by the dashboard's allocation chart.

The rule (docs/billing.md, "Metering"): a Running interval opens at a transition to Running and closes
at the job's next transition, whatever its kind. Histories carry the cluster's own timestamps, so an
interval is exactly the time the job's pods ran. Steps of ``run_intervals``:

1. Read the transitions in order of (job, time, id).
2. A transition of another job, or the end of the rows, leaves the open interval of the previous job
   open (``end is None``): callers decide where it ends (``now`` for a running job, the sweeper's
   ``closed_at`` for a job whose closing row was lost).
3. Any transition of the same job closes the open interval at its time; an interval of no length is
   dropped.
4. A transition to Running opens a new interval.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class Transition:
    """One row of a job's history as the builder reads it."""

    job_id: int
    at: datetime
    opens_run: bool  # a transition to Running
    detail: Mapping[str, Any]  # admission detail: gpu_model, gpus, replicas, capacity_type


@dataclass(frozen=True, slots=True)
class RunInterval:
    """A job's Running interval with the admission detail of the transition that opened it."""

    job_id: int
    start: datetime
    end: datetime | None  # None: still open at the end of the history
    detail: Mapping[str, Any]

    @property
    def gpu_model(self) -> str:
        return self.detail.get("gpu_model") or ""

    @property
    def closed_end(self) -> datetime:
        """The end of a closed interval; an open one has none (``ValueError``)."""
        if self.end is None:
            raise ValueError(f"job {self.job_id}: the interval from {self.start} is still open")
        return self.end

    def ending(self, end: datetime) -> RunInterval:
        return RunInterval(self.job_id, self.start, end, self.detail)


def run_intervals(transitions: Iterable[Transition]) -> list[RunInterval]:
    """Running intervals of the histories in ``transitions`` (see the module docstring), in row order."""
    intervals: list[RunInterval] = []
    opened: Transition | None = None
    for transition in transitions:
        if opened is not None:
            if transition.job_id != opened.job_id:
                intervals.append(RunInterval(opened.job_id, opened.at, None, opened.detail))
            elif transition.at > opened.at:
                intervals.append(RunInterval(opened.job_id, opened.at, transition.at, opened.detail))
            opened = None
        if transition.opens_run:
            opened = transition
    if opened is not None:
        intervals.append(RunInterval(opened.job_id, opened.at, None, opened.detail))
    return intervals


def metered_intervals(
    intervals: Iterable[RunInterval], *, job_running: bool, closed_at: datetime | None
) -> list[RunInterval]:
    """One job's intervals that metering bills: the closed ones, and the sweeper's.

    An interval still open while the job is no longer Running lost its closing row (e.g. a worker died
    mid-write): the sweeper closes it at ``closed_at`` (the job's last recorded cluster time), or drops
    it when that is unknown or not after its start. The open interval of a Running job waits.
    """
    billed = []
    for interval in intervals:
        if interval.end is not None:
            billed.append(interval)
        elif not job_running and closed_at is not None and closed_at > interval.start:
            billed.append(interval.ending(closed_at))
    return billed


def sweep_time(history: Sequence[Transition], finished_at: datetime | None) -> datetime | None:
    """Where the sweeper closes a Running interval left open by a job that is no longer Running: the
    job's last recorded cluster time, its last transition or its ``finished_at``, whichever is later."""
    closed_at = history[-1].at if history else None
    if finished_at is not None and (closed_at is None or finished_at > closed_at):
        closed_at = finished_at
    return closed_at


def intervals_in_view(intervals: Iterable[RunInterval], *, since: datetime, now: datetime) -> list[RunInterval]:
    """Intervals that overlap (``since``, ``now``], starting no earlier than ``since``; open ones end at
    ``now``. Closed intervals first, then open ones, each in the order given."""
    items = list(intervals)
    closed = [
        RunInterval(i.job_id, max(i.start, since), i.end, i.detail)
        for i in items
        if i.end is not None and i.end > since
    ]
    running = [RunInterval(i.job_id, max(i.start, since), now, i.detail) for i in items if i.end is None]
    return closed + running
