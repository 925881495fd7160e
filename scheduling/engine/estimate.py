"""Estimated start times: the engine run forward over the current state (the forecast).

Steps (each is one part of :meth:`Forecast.run`):

1. Start from a cycle's final state: free capacity after its admissions (device by device, so
   fragmentation counts), quota in use, the placer and its scorers.
2. Every running or just-admitted job ends at ``started_at`` plus its expected runtime in the
   cluster's own seconds, given how long it has run (``Snapshot.running_runtimes``; else
   ``Snapshot.runtimes``; its requested ``runtime_s`` without one); one past its P50 at its P90, one
   past that a tenth of its P90 from now; a preemption victim ends now; a job that runs until stopped
   (an inference service's replica, ``Workload.until_stopped``) never ends.
3. Time advances from end to end; ends close to the first are taken together (within ``COALESCE_S``
   or ``RESOLUTION`` of the time ahead of now, whichever is longer: 0.5 %, so a start an hour ahead
   is told to within 18 seconds; at 5 %, ends far ahead taken together freed their nodes at once
   where the cycles let small jobs take them one by one, and gangs were told early starts; 1 % until
   2026-11-30: ``pop_step``).
   What ended is given back: its replicas' capacity on their nodes and its quota to its queue. The
   waiting jobs are then tried in the cycle's admission order (priority, fair share of their queues as
   the forecast's usage changes, submission time) with the cycle's own decision (``Host.decide``:
   quota with borrowing, then placement of the whole gang; no preemption). Jobs of one shape and
   queue are a group: the first of a group that does not fit stops the group for that step (capacity
   and quota only shrink within a step), and a group is tried again only after capacity of a GPU
   model it may use came back. A job that fits starts then, holds its placement and quota, and ends
   after its expected runtime (it joins the ends of step 3). Expected submissions (``Arrivals``: the
   last period's submissions again, each at its own time plus k periods, up to a horizon) join the
   groups when the run reaches their period; a group whose next job is not submitted yet waits for
   that job's submission time (an event like an end). They compete as submitted jobs do and get no
   estimate themselves. The cycle's backfill reservations (``reservations``) stand until their jobs
   start: a job decided while it would still run at a reservation's shadow time leaves its room alone
   (``Holds``); groups are then also told apart by expected runtime, a reserved job is its own group.
4. It stops when every waiting job has started (or the one asked about, ``until``), after
   ``max_steps`` steps, or once it has taken ``max_decisions`` decisions (``Policy.forecast_decisions``,
   as Slurm's backfill bounds the jobs it tests): a job not started by then has no estimate (beyond
   the forecast's reach). Expected submissions' failed decisions are charged to a budget of their
   own, as large (``spare_budget``), so that they do not spend the waiting jobs' reach.
5. Everything staged is undone: the cycle's state, memo and figures are as before.

Run twice, once with each job's P50 expected runtime and once with its P90 one: the P50 and P90
estimated starts. Jobs of a blocked team, invalid requests and jobs that never fit get none (the
cycle does not hand them in).
"""

from __future__ import annotations

import heapq
import operator
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from .admission import FairShare
from .capacity import Cluster
from .forecast_queue import (
    EXPECTED,
    Arrivals,
    Recorder,
    Runtimes,
    _End,
    _Expected,
    _order_key,
    _PeriodPlan,
    _Queue,
    expected_runtime,
    group_key,
    run_group_key,
)
from .model import ReplicaPlacement, Workload
from .outcome import Fit, Outcome
from .preemption import Holder
from .quota import QuotaBook, models_to_try
from .reservations import Holds, Reservation, active

NO_END = float("inf")
"""The expected end of a job that runs until stopped (``Workload.until_stopped``): it never gives its
capacity or quota back in the forward run."""
COALESCE_S = 1.0
RESOLUTION = 0.005
MAX_STEPS = 2000
P50, P90 = 0, 1


class Host(Protocol):
    """What the forecast needs of a cycle (``cycle._Cycle``)."""

    cluster: Cluster
    quota: QuotaBook
    fair: FairShare
    holds: Holds

    def forecast_decide(self, job: Workload) -> Outcome: ...

    def forecast_begin(self) -> object: ...

    def forecast_step(self) -> None: ...

    def forecast_end(self, saved: object) -> None: ...


@dataclass(frozen=True, slots=True)
class Start:
    """When and where the forecast starts a job."""

    at: float
    gpu_model: str | None
    placements: tuple[ReplicaPlacement, ...]


def ends_at(job: Workload, start: float, runtime: float) -> float:
    """When ``job``, started at ``start``, is expected to end: after ``runtime``; never (``NO_END``) if it
    runs until stopped."""
    return NO_END if job.until_stopped else start + runtime


def spare_budget(budget: int) -> int:
    """How many failed decisions of expected submissions (``Arrivals``) a run with ``budget`` decisions
    charges to a budget of their own, not to ``budget``: as many. The waiting jobs' reach is then the
    same with or without expected submissions that do not fit; the run's decisions are at most twice
    ``budget``."""
    return budget


def pop_step(ends: list[_End], now: float) -> tuple[float, float, list[_End]]:
    """Step 3's next step, taken off the heap ``ends``: its time (the first end's), how far it reaches
    (``COALESCE_S`` or ``RESOLUTION`` of the time ahead of now, whichever is longer: an expected
    submission dated later is not submitted yet), and the ends within that reach, taken together."""
    first = ends[0].at
    reach = first + max(COALESCE_S, RESOLUTION * (first - now))
    taken = []
    while ends and ends[0].at <= reach:
        taken.append(heapq.heappop(ends))
    return first, reach, taken


class Forecast:
    """The forward run of steps 1-5 over one cycle's final state (``host``)."""

    def __init__(
        self,
        host: Host,
        now: float,
        runtimes: Runtimes,
        flavors: Mapping[str, tuple[str, ...]],
        running: Runtimes | None = None,
    ) -> None:
        self.ends_cache: dict[int, list[_End]] = {}
        self.host = host
        self.now = now
        self.runtimes = runtimes
        self.running = running or {}  # running jobs' runtimes given how long they ran (``Snapshot``)
        self.flavors = flavors  # ClusterQueue -> its GPU models in flavor order
        self.reservations: Sequence[Reservation] = ()  # the run's (``reservations``)
        self.which = P50
        # The expected submissions of each period (``_Expected``), made once: the same in every run over
        # this state (a dry run's check runs the forecast again; a period is ~2,000 copies of jobs).
        self.expected_copies: dict[tuple[int, bool], list[tuple[Workload, str, str]]] = {}
        # What adding jobs to a run's queue computes once per state (``_Queue``): the groups of the
        # first ``fixed`` waiting jobs (``run``), and how each period's expected copies join it
        # (``period_plan``; their groups as slot numbers), per ``which`` with the reservations they
        # were made under (groups depend on both with them).
        self.base_queues: dict[int, tuple[tuple[Reservation, ...], list[tuple[Workload, str]], _Queue]] = {}
        self.period_plans: dict[tuple[int, bool, int], tuple[tuple[Reservation, ...], object, _PeriodPlan]] = {}
        self.slot_keys: list[tuple[object, ...]] = []
        self.slot_of: dict[tuple[object, ...], int] = {}

    def __getstate__(self) -> dict[str, object]:
        """Pickled without the expected submissions' copies and the queues' memos (made again where
        needed)."""
        memos: dict[str, object] = {"base_queues": {}, "period_plans": {}, "slot_keys": [], "slot_of": {}}
        return {**self.__dict__, "expected_copies": {}, **memos}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)

    def run(
        self,
        waiting: Sequence[tuple[Workload, str]],
        holders: Sequence[Holder],
        victims: Collection[str],
        which: int = P50,
        until: str | None = None,
        max_steps: int = MAX_STEPS,
        max_decisions: int | None = None,
        recorder: Recorder | None = None,
        arrivals: Arrivals | None = None,
        reservations: Sequence[Reservation] = (),
        fixed: int = 0,
    ) -> dict[str, Start]:
        """When (and where) each ``(job, cluster queue)`` of ``waiting`` (in the cycle's order) starts;
        a job missing from the answer has no estimate. ``until``: stop once this job has started.
        ``fixed``: the first ``fixed`` of ``waiting`` are those of the previous runs that passed it (a
        dry run's checks on one state): their groups are made once and copied (``_queue``).
        ``recorder``: told each step's ends, each group taken off the heap, and what is left.
        ``arrivals``: the submissions expected meanwhile (step 3), which compete as submitted jobs do.
        ``reservations``: the cycle's (``reservations``): until its job starts, each keeps its room from
        every job that would still run at its shadow time, but the reserved jobs before it."""
        host, cluster, quota, fair = self.host, self.host.cluster, self.host.quota, self.host.fair
        self.reservations, self.which = reservations, which
        reserved = {r.job_id: k for k, r in enumerate(reservations)}
        started_reserved: set[str] = set()
        saved = host.forecast_begin()
        # Step 5 puts back the state as it is now (capacity, quota, fair share) and tells the cluster's
        # listeners of every change undone, newest first.
        before = (cluster.save_free(), quota.save_usage(), fair.save_usage())
        applied: list[tuple[ReplicaPlacement, int]] = []
        starts: dict[str, Start] = {}
        try:
            # 2. Ends of what holds capacity now (a heap; the same for every run over one state).
            ends = list(self.ends(holders, victims, which))
            queue = self._queue(waiting, len(ends), fixed)
            upper = which == P90 and arrivals is not None and arrivals.upper_p90
            expected = _Expected(arrivals, self.now, upper, self.expected_copies) if arrivals is not None else None
            left = len(waiting)
            dirty_since: dict[str | None, int] = {}  # GPU model -> the last step capacity of it came back
            dirty_all = 0  # the last step CPU-only work ended (its CPU and memory help every model)
            step = 0
            budget = max_decisions if max_decisions is not None else len(waiting) * max_steps
            # Expected submissions' failed decisions are charged to a budget of their own (as large),
            # not the waiting jobs': they get no estimate, and where they fail at every step they
            # spent the waiting jobs' reach (``spare_budget``).
            spare = spare_budget(budget)
            if recorder is not None:
                recorder.begin({key: (i, len(queue.groups[i].jobs)) for key, i in queue.by_key.items()}, budget)
                queue.recorder = recorder
            while left and step < max_steps and budget > 0 and (until is None or until not in starts):
                if expected is not None:
                    expected.due(ends, queue)
                if not ends or ends[0].at == NO_END:
                    break  # nothing left ends (what runs until stopped holds its room for good)
                step += 1
                # 3. Give back what ended (an expected submission's arrival gives nothing back but
                # lets its group try).
                t, reach, released_now = pop_step(ends, self.now)
                host.holds.clear()  # computed on the room free before these ends
                for ended in released_now:
                    applied.extend((p, -1) for p in ended.placements if cluster.apply(p, -1))
                    if ended.request:
                        quota.add(ended.cq, ended.request, -1)
                        fair.add(ended.lq, ended.cq, ended.request, -1)
                    for model in ended.models:
                        dirty_since[model] = step
                    if None in ended.models:
                        dirty_all = step
                dirty_since[None] = step  # CPU-only work may use any node
                if recorder is not None:
                    recorder.step(t, released_now)
                host.forecast_step()
                # Try the groups that may use what came back in the cycle's admission order (priority,
                # fair share of their queues as usage changes, submission), a heap refreshed lazily as
                # ``admission.AdmissionOrder`` is (shares only grow within a step).
                # A key is taken again when popped only if its queues' usage changed since it was taken
                # (``FairShare.unchanged_since``; entries carry the count of changes they were taken at).
                groups = queue.groups
                came_back: dict[frozenset[str | None], int] = {}  # per set of models: its last step
                heads = []
                stamp = fair.changes
                for g in groups:
                    if g.head < len(g.jobs):
                        last = came_back.get(g.models)
                        if last is None:
                            last = came_back[g.models] = max((dirty_all, *(dirty_since.get(m, 0) for m in g.models)))
                        if g.tried_at < last:
                            heads.append((_order_key(fair, g), g.index, stamp))
                heapq.heapify(heads)
                while heads and budget > 0:
                    key, index, stamp = heapq.heappop(heads)
                    group = groups[index]
                    lq = group.jobs[group.head][1].local_queue
                    if not fair.unchanged_since(stamp, lq, fair.lq_cq.get(lq, "")):
                        stamp = fair.changes
                        fresh = _order_key(fair, group)
                        if fresh != key:
                            heapq.heappush(heads, (fresh, index, stamp))
                            if recorder is not None:
                                recorder.popped(key, index, False, None)
                            continue
                    group.tried_at = step
                    job = group.jobs[group.head][1]
                    if job.created_at > reach and job.id in queue.alias:
                        continue  # expected, not submitted yet: its arrival lets the group try again
                    budget -= 1
                    if reservations:
                        end_at = ends_at(job, t, expected_runtime(job, self.runtimes, which, queue.alias))
                        indices = active(reservations, end_at, reserved.get(job.id), started_reserved)
                        host.holds.set(reservations, indices)
                    outcome = host.forecast_decide(job)
                    if not isinstance(outcome, Fit):
                        if spare > 0 and job.id in queue.alias:
                            spare -= 1
                            budget += 1
                        if recorder is not None:
                            recorder.popped(key, index, True, None)
                        continue  # the rest of the group does not fit either, this step
                    admission = outcome.admission
                    applied.extend((p, 1) for p in admission.placements)
                    quota.add(group.cq, outcome.request)
                    fair.add(job.local_queue, group.cq, outcome.request)
                    runtime = expected_runtime(job, self.runtimes, which, queue.alias)
                    models = frozenset((admission.gpu_model,))
                    end = _End(
                        ends_at(job, t, runtime),
                        queue.seq,
                        admission.placements,
                        job.local_queue,
                        group.cq,
                        outcome.request,
                        models,
                        job.id,
                    )
                    if job.id in reserved:
                        started_reserved.add(job.id)
                    heapq.heappush(ends, end)
                    if recorder is not None:
                        recorder.popped(key, index, True, end)
                    queue.seq += 1
                    group.head += 1
                    if job.id not in queue.alias:
                        starts[job.id] = Start(t, admission.gpu_model, admission.placements)
                        left -= 1
                    if until == job.id:
                        break
                    if group.head < len(group.jobs):
                        heapq.heappush(heads, (_order_key(fair, group), index, fair.changes))
            if recorder is not None:
                recorder.finish(list(ends), left, step)
        finally:
            # 5. Undo.
            host.holds.clear()
            cluster.restore_free(before[0], applied)
            quota.restore_usage(before[1])
            fair.restore_usage(before[2])
            host.forecast_end(saved)
        return starts

    def _queue(self, waiting: Sequence[tuple[Workload, str]], seq: int, fixed: int) -> _Queue:
        """The run's queue of ``waiting``: its first ``fixed`` jobs' groups (``group_key``, the cost of a
        queue of thousands) made once per ``which`` and reservations and copied, the rest added to the
        copy, as ``_Queue.add`` adds them one by one (the same groups, in the same order, the same
        ranks). The made ones are used while they are the first of the ``fixed`` (the same objects);
        jobs after them are added to them (a later run passed more)."""
        if fixed <= 0:
            queue = _Queue(self, seq)
            for job, cq in waiting:
                queue.add(job, cq)
            return queue
        reservations, head = tuple(self.reservations), waiting[:fixed]
        made = self.base_queues.get(self.which)
        if made is None or made[0] != reservations or len(made[1]) > fixed or not all(map(operator.is_, made[1], head)):
            made = self.base_queues[self.which] = (reservations, [], _Queue(self, seq))
        _, known, base = made
        for item in head[len(known) :]:
            base.add(*item)
            known.append(item)
        queue = base.fork(seq)
        for job, cq in waiting[fixed:]:
            queue.add(job, cq)
        return queue

    def period_plan(self, k: int, upper: bool, made: list[tuple[Workload, str, str]]) -> _PeriodPlan:
        """How period ``k``'s expected copies (``made``: ``_Expected.period_copies``) join a run's queue
        (``_PeriodPlan``), made once per ``which`` and reservations (groups depend on both with them)."""
        reservations = tuple(self.reservations)
        memo_key = (k, upper, self.which)
        known = self.period_plans.get(memo_key)
        if known is not None and known[0] == reservations and known[1] is made:
            return known[2]
        parts: dict[int, tuple[list[int], list[Workload], str]] = {}
        arrivals: list[tuple[float, str, str, frozenset[str | None]]] = []
        models: dict[int, frozenset[str | None]] = {}
        for offset, (copy, cq, origin) in enumerate(made):
            key = (*self.group_key(copy, cq, {copy.id: origin}), EXPECTED)
            slot = self.slot_of.get(key)
            if slot is None:
                slot = self.slot_of[key] = len(self.slot_keys)
                self.slot_keys.append(key)
            part = parts.get(slot)
            if part is None:
                part = parts[slot] = ([], [], cq)
                models[slot] = self.models(copy, cq)
            part[0].append(offset)
            part[1].append(copy)
            arrivals.append((copy.created_at, copy.local_queue, cq, models[slot]))
        plan = _PeriodPlan(
            [(slot, offsets, copies, cq) for slot, (offsets, copies, cq) in parts.items()],
            {copy.id: origin for copy, _, origin in made},
            arrivals,
        )
        self.period_plans[memo_key] = (reservations, made, plan)
        return plan

    def ends(self, holders: Sequence[Holder], victims: Collection[str], which: int) -> list[_End]:
        """Step 2's heap of ends, kept per ``which`` (the holders of one cycle's final state do not
        change between runs)."""
        cached = self.ends_cache.get(which)
        if cached is None:
            cached = []
            models_of: dict[str | None, frozenset[str | None]] = {}  # one set per GPU model
            # ``tuple.__new__``: an ``_End`` without the named tuple's Python-level ``__new__`` (18,000 of them)
            now, end_at, make = self.now, self.end_at, tuple.__new__
            for seq, holder in enumerate(holders):
                w = holder.workload
                at = now if w.id in victims else end_at(w, which)
                models = models_of.get(w.gpu_model)
                if models is None:
                    models = models_of[w.gpu_model] = frozenset((w.gpu_model,))
                cached.append(
                    make(_End, (at, seq, holder.placements, holder.lq, holder.cq, holder.request, models, ""))
                )
            heapq.heapify(cached)
            self.ends_cache[which] = cached
        return cached

    def end_at(self, w: Workload, which: int) -> float:
        """When a running job is expected to end: its start plus its expected runtime given how long it
        has run (``Snapshot.running_runtimes``, else its plain one); one already past its P50 is
        expected to end at its P90, one past that soon (a tenth of its P90 from now); one that runs
        until stopped, never (``NO_END``)."""
        if w.until_stopped:
            return NO_END
        started = w.started_at if w.started_at is not None else self.now
        known = self.running.get(w.id) or self.runtimes.get(w.id, (w.runtime_s, w.runtime_s))
        for runtime in known[which:]:
            if started + runtime > self.now:
                return started + runtime
        return self.now + 0.1 * known[P90]

    def group_key(self, job: Workload, cq: str, alias: Mapping[str, str] | None = None) -> tuple[object, ...]:
        """The run's group of ``job``: ``group_key``, and with reservations its expected runtime (which
        reservations it must leave alone) and, for a reserved job, its id (a group of its own)."""
        if not self.reservations:
            return group_key(job, cq)
        return run_group_key(job, cq, self.reservations, expected_runtime(job, self.runtimes, self.which, alias))

    def models(self, job: Workload, cq: str) -> frozenset[str | None]:
        """The GPU models whose capacity coming back may let ``job`` start (``None``: CPU-only work,
        which any end may help)."""
        return frozenset(models_to_try(job, self.flavors.get(cq, ())))
