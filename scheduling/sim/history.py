"""History replay: the portal's own job history run again through the engine's ``run_cycle``.

The what-if page replays a window of real history under changed quotas, weights or placement policy
and puts it next to what happened. Replaying with the settings the history was made under gives back
the recorded admissions: the cycle is the same code, the jobs are the same workloads, and arrivals get
their cycle as the portal's submissions do (``arrival_batch_s`` later, one cycle for a burst); only
completions differ (the portal sees one on its next cycle, at most one beat later; the replay at once).

Event loop (times are POSIX seconds supplied by the caller, never read here):

1. Jobs that were running at the window's start are running at ``start_s`` on their recorded
   placements and end at their recorded end (or later, after a requeue) unless preempted.
2. Events are arrivals (a job joins the queue at its first wait's start), completions (a running
   job's recorded run time has elapsed since it was admitted) and departures (a job that left the
   queue without ever running, e.g. cancelled). At one timestamp completions come first, then
   departures, then arrivals.
3. After the events of a timestamp, one cycle runs over the pending and running jobs, except when
   they were only arrivals and ``arrival_batch_s`` > 0: as a submission asks the portal for a cycle
   that long after it (``CYCLE_BATCH_S``, shared by every submission until it starts), the cycle
   runs then, over everything that arrived meanwhile. (A cycle per arrival would admit a burst's
   first job alone and preempt it for a higher-priority one a millisecond later, which the portal,
   seeing the whole burst in one cycle, never does.) Its
   preemptions stop their victims at once (the victim goes back to the queue and will run its whole
   time again, as a requeued pod restarts); the admissions start at once and complete after their run
   time. A cycle that preempted is followed by another ``preempt_delay_s`` later (the portal's next
   cycle, once the victims' pods are gone; 0 = at once).
4. Every admission is recorded as an ``Attempt`` (queued, admitted, ended, GPU model, billed share,
   how it ended). Jobs still running at ``end_s`` have an open attempt; jobs never admitted have none
   and are counted as still waiting.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypedDict

from scheduling.engine.cycle import run_cycle
from scheduling.engine.model import Policy, ReplicaPlacement, Snapshot, Workload, WorkloadState
from scheduling.engine.shares import placement_billed_units

COMPLETED = "completed"
PREEMPTED = "preempted"
RUNNING = "running"  # still running when the window ends

_COMPLETION, _DEPARTURE, _ARRIVAL, _TICK = 0, 1, 2, 3


class ReplayTiming(TypedDict):
    """When the portal runs its cycles (``replay_history``'s keywords of that name)."""

    preempt_delay_s: float
    arrival_batch_s: float


@dataclass(frozen=True, slots=True)
class HistoryJob:
    """One job of the window as the replay needs it.

    ``workload``: the job as the engine saw it when it was pending (state pending, no placements;
    ``created_at`` is its submission, which the admission order reads). ``arrival_s``: when its wait
    began. ``run_s``: how long it held its placement in the attempt that ended it, from admission to
    end (quota and devices are held from admission; a job still running when the window ends runs to
    the end). ``start_lag_s``: how long after admission its pods ran then (image pull, binding): the
    replay's GPU-hours count from there, as the bill does. ``leave_s``: a job that never ran leaves the queue
    then (cancelled). ``running``: for a job running at the window's start, that workload (state
    running, recorded placements) and ``ends_s`` its recorded end."""

    workload: Workload
    arrival_s: float
    run_s: float | None
    leave_s: float | None = None
    running: Workload | None = None
    ends_s: float | None = None
    start_lag_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Attempt:
    """One admission and how it ended (the same shape for recorded and replayed history)."""

    job_id: str
    team: str
    queued_s: float
    admitted_s: float
    ended_s: float | None  # None = still running at the window's end
    gpu_model: str
    gpu_share_7000ths: int  # billed share, all replicas
    outcome: str  # completed | preempted | running | any final state the recorded job reached
    nodes: tuple[str, ...] = ()
    borrowed: bool = False
    capacity_type: str = ""  # on-demand | spot | reserved (prices differ)
    started_s: float | None = None  # pods running; None = at admission (the replay starts pods at once)
    placements: tuple[ReplicaPlacement, ...] = ()  # where its replicas ran (the replay's; empty when recorded)
    reason: str = ""  # a replayed preemption: the engine's reason

    @property
    def run_from_s(self) -> float:
        return self.admitted_s if self.started_s is None else self.started_s


@dataclass(frozen=True, slots=True)
class HistoryRun:
    attempts: tuple[Attempt, ...]
    waiting: tuple[tuple[str, str, float], ...]  # (job id, team, queued_s) never admitted by end_s
    cycles: int


def replay_history(
    base: Snapshot,
    jobs: Sequence[HistoryJob],
    policy: Policy,
    *,
    start_s: float,
    end_s: float,
    node_capacity_types: Mapping[str, str] | None = None,
    preempt_delay_s: float = 0.0,
    arrival_batch_s: float = 0.0,
    on_progress: Callable[[float], None] | None = None,
) -> HistoryRun:
    """Replay ``jobs`` over ``[start_s, end_s]`` on ``base``'s nodes and queues (its workloads are
    ignored). ``on_progress`` gets the fraction of the window replayed, now and then."""
    replay = _HistoryReplay(base, jobs, policy, start_s, end_s, on_progress)
    replay.capacity_types = dict(node_capacity_types or {})
    replay.preempt_delay_s = preempt_delay_s
    replay.arrival_batch_s = arrival_batch_s
    return replay.run()


@dataclass(slots=True)
class _Live:
    job: HistoryJob
    workload: Workload
    queued_s: float
    admitted_s: float = 0.0
    started_s: float | None = None  # pods running (None: at admission)
    ends_s: float | None = None
    generation: int = 0  # bumps on every admission, so a stale completion event is ignored


class _HistoryReplay:
    def __init__(
        self,
        base: Snapshot,
        jobs: Sequence[HistoryJob],
        policy: Policy,
        start_s: float,
        end_s: float,
        on_progress: Callable[[float], None] | None,
    ) -> None:
        self.base = replace(base, workloads=())
        self.policy = policy
        self.start_s, self.end_s = start_s, end_s
        self.on_progress = on_progress
        self.pending: dict[str, _Live] = {}
        self.running: dict[str, _Live] = {}
        self.attempts: list[Attempt] = []
        self.events: list[tuple[float, int, str, int]] = []  # (time, kind, job id, generation)
        self.jobs = {j.workload.id: j for j in jobs}
        self.cycles = 0
        self.capacity_types: dict[str, str] = {}
        self.preempt_delay_s = 0.0
        self.arrival_batch_s = 0.0
        self.batch_due_s: float | None = None  # an arrivals' cycle asked for and not yet run
        self.borrowed: dict[str, bool] = {}
        # 1. Running at the start, on their recorded placements.
        for job in jobs:
            if job.running is not None:
                live = _Live(job, job.running, job.arrival_s, admitted_s=job.running.started_at or start_s)
                live.ends_s = job.ends_s
                self.running[job.workload.id] = live
                if job.ends_s is not None:
                    heapq.heappush(self.events, (job.ends_s, _COMPLETION, job.workload.id, 0))
            else:
                heapq.heappush(self.events, (max(job.arrival_s, start_s), _ARRIVAL, job.workload.id, 0))
                if job.leave_s is not None:
                    heapq.heappush(self.events, (job.leave_s, _DEPARTURE, job.workload.id, 0))

    def run(self) -> HistoryRun:
        last_report = self.start_s
        while self.events and self.events[0][0] <= self.end_s:
            now = self.events[0][0]
            # 2. This timestamp's completions, departures, then arrivals.
            only_arrivals = self._take_events(now)
            if only_arrivals and self.arrival_batch_s > 0:
                if self.batch_due_s is None:
                    self.batch_due_s = now + self.arrival_batch_s
                    heapq.heappush(self.events, (self.batch_due_s, _TICK, "", 0))
                continue
            if self.batch_due_s is not None and now >= self.batch_due_s:
                self.batch_due_s = None  # this cycle is the one the arrivals asked for
            # 3. Cycles until one preempts nothing (or the next comes after the victims are gone).
            while self.pending and self._cycle(now):
                if self.preempt_delay_s > 0:
                    heapq.heappush(self.events, (now + self.preempt_delay_s, _TICK, "", 0))
                    break
            if self.on_progress is not None and now - last_report >= (self.end_s - self.start_s) / 50:
                last_report = now
                self.on_progress(min(1.0, (now - self.start_s) / max(1.0, self.end_s - self.start_s)))
        # 4. Still running at the end: open attempts.
        for live in self.running.values():
            self._record(live, None, RUNNING)
        waiting = tuple(sorted((i, live.workload.team, live.queued_s) for i, live in self.pending.items()))
        attempts = tuple(sorted(self.attempts, key=lambda a: (a.admitted_s, a.job_id)))
        return HistoryRun(attempts=attempts, waiting=waiting, cycles=self.cycles)

    def _take_events(self, now: float) -> bool:
        """Take ``now``'s events; True when they were all arrivals."""
        only_arrivals = True
        while self.events and self.events[0][0] == now:
            _, kind, job_id, generation = heapq.heappop(self.events)
            only_arrivals = only_arrivals and kind == _ARRIVAL
            if kind == _COMPLETION:
                live = self.running.get(job_id)
                if live is not None and live.generation == generation:
                    del self.running[job_id]
                    self._record(live, now, COMPLETED)
            elif kind == _DEPARTURE:
                self.pending.pop(job_id, None)
            elif kind == _ARRIVAL and job_id not in self.running:
                job = self.jobs[job_id]
                self.pending[job_id] = _Live(job, job.workload, job.arrival_s)
        return only_arrivals

    def _cycle(self, now: float) -> bool:
        """One cycle at ``now``; True when it preempted (another cycle follows at once)."""
        workloads = tuple(live.workload for live in self.pending.values()) + tuple(
            live.workload for live in self.running.values()
        )
        plan = run_cycle(replace(self.base, workloads=workloads), self.policy, now)
        self.cycles += 1
        for preemption in plan.preemptions:
            live = self.running.pop(preemption.workload_id, None)
            if live is None:
                continue
            self._record(live, now, PREEMPTED, preemption.reason)
            self.pending[preemption.workload_id] = _Live(live.job, live.job.workload, now, generation=live.generation)
        for admission in plan.admissions:
            live = self.pending.pop(admission.workload_id)
            live.workload = replace(
                live.workload,
                state=WorkloadState.RUNNING,
                gpu_model=admission.gpu_model,
                placements=admission.placements,
                started_at=now,
            )
            live.admitted_s = now
            live.started_s = now + live.job.start_lag_s if live.job.start_lag_s > 0 else None
            live.generation += 1
            run_s = live.job.run_s
            live.ends_s = None if run_s is None else now + run_s
            self.running[admission.workload_id] = live
            if live.ends_s is not None:
                heapq.heappush(self.events, (live.ends_s, _COMPLETION, admission.workload_id, live.generation))
            self.borrowed[admission.workload_id] = admission.borrowed
        return bool(plan.preemptions)

    def _record(self, live: _Live, ended_s: float | None, outcome: str, reason: str = "") -> None:
        w = live.workload
        self.attempts.append(
            Attempt(
                job_id=w.id,
                team=w.team,
                queued_s=live.queued_s,
                admitted_s=live.admitted_s,
                ended_s=ended_s,
                gpu_model=w.gpu_model or "",
                gpu_share_7000ths=sum(placement_billed_units(p) for p in w.placements),
                outcome=outcome,
                nodes=tuple(sorted({p.node for p in w.placements})),
                borrowed=self.borrowed.get(w.id, False),
                capacity_type=self.capacity_types.get(w.placements[0].node, "") if w.placements else "",
                # A run cut before its pods ran holds nothing the bill counts.
                started_s=None if live.started_s is None or ended_s is None else min(live.started_s, ended_s),
                placements=w.placements,
                reason=reason,
            )
        )
