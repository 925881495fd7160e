"""A forecast's timeline, kept so that a dry run replays it instead of running the forecast again.

The cycle's forecast (``estimate.Forecast.run``) records, for each step, the ends it gave back and every
group it took off its heap in order (the key it was taken with; whether it was decided; what it
started). ``Replay.start`` answers "when would one more job start" from that record, with the cycle's
own decision, and gives the same answer as the forecast run again with the job among the waiting ones
(``tests/scheduling/engine/test_timeline.py``), because until that job starts, adding it changes
nothing the forecast does:

- the other jobs' decisions do not depend on it: a job that does not fit holds nothing, and the memo
  it leaves only repeats what a decision on the same state would say (capacity and quota only shrink
  within a step);
- the heap holds the same entries plus its own, so the groups come off in the same order, and the job
  comes off just before the first recorded entry whose key is greater than its own (keys end with the
  waiting rank: no ties);
- its own decisions count against the same budget (``Policy.forecast_decisions``): it starts only if
  its successful decision is within it; the record's failed decisions of expected submissions count
  against their own budget while it lasts, as in the run (``estimate.spare_budget``).

So a replay walks the record: 1. it follows the job's place in the admission order (its queue's fair
share moves only with the ends and starts of its ClusterQueue) and finds where the forecast would
decide it: in each step where capacity of a model it may use came back (its group's rule), just before
the first entry ordered after it; a job of the same shape and queue as a recorded group comes after
that group's jobs, once all of them have started. 2. At each such point it decides the job with the
cycle's own decision on the state there. The state at a point is the cycle's final state plus the
record's ends given back and starts taken up to it: a few copies of the cycle's state (``cursors``)
stay parked along the record, and the nearest one is moved there (no decision, no placement search:
only capacity and quota move), so consecutive checks move them little. When the record stops because
every waiting job had started, the replay goes on over the ends left, the job alone.

Expected submissions (``forecast_queue.Arrivals``) are groups of their own in the record, so the job's place
among them is found as among the waiting jobs' groups. Past the record the replay adds no further
expected submissions (the run stopped before their periods came): there a replay may start the job
earlier than the run itself would, where a later period's submission would have come first.
"""

from __future__ import annotations

import copy
import heapq
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Protocol, cast

import numpy as np

from .admission import FairShare
from .capacity import FULL, Cluster
from .estimate import MAX_STEPS, NO_END, Start, ends_at, pop_step, spare_budget
from .fit import Shape, replica_capacity
from .forecast_queue import _End, group_key, order_key
from .model import ReplicaPlacement, Workload
from .outcome import Fit, Outcome
from .quota import QuotaBook
from .reservations import Holds, Reservation, active

CURSORS = 3  # copies of the state parked along one record
DECIDED_KEPT = 4096  # decisions remembered per replay (``Replay.decided``)
WALKS_KEPT = 4  # walks remembered per group of jobs (``Replay.walked``)


@dataclass(slots=True)
class _Pop:
    key: tuple[object, ...]
    index: int
    decided: bool  # False: its key was stale, it went back on the heap
    started: _End | None  # its job started (and ends then)
    before: int = 0  # events of the record before it (set by ``Timeline.seal``)


@dataclass(slots=True)
class _Step:
    at: float
    released: list[_End]
    pops: list[_Pop] = field(default_factory=list)
    models: frozenset[str | None] = frozenset()  # the GPU models whose capacity came back (None: any)
    after: int = 0  # events of the record up to its end (set by ``Timeline.finish``)


class Timeline:
    """One forecast run's record (``forecast_queue.Recorder``), and its events in order once sealed."""

    def __init__(self) -> None:
        self.groups: dict[tuple[object, ...], tuple[int, int]] = {}  # group key -> (index, size)
        self.expected_groups: dict[int, tuple[object, ...]] = {}  # index -> decision key
        self.budget = 0
        self.steps: list[_Step] = []
        self.ends: list[_End] = []  # the heap of ends left when it stopped
        self.left = 0  # waiting jobs it did not start
        self.waiting = 0
        # (end, sign): -1 gives back what an end holds, 1 takes it (a start); set by ``seal``.
        self.events: list[tuple[_End, int]] = []
        self.started_at: dict[str, int] = {}  # job id -> the event of its start (set by ``finish``)

    def begin(self, groups: Mapping[tuple[object, ...], tuple[int, int]], budget: int) -> None:
        self.groups = dict(groups)
        self.budget = budget
        self.waiting = sum(size for _, size in groups.values())

    def step(self, at: float, released: list[_End]) -> None:
        models: set[str | None] = set()
        for end in released:
            models |= end.models
        self.steps.append(_Step(at, released, models=frozenset(models)))

    def popped(self, key: tuple[object, ...], index: int, decided: bool, started: _End | None) -> None:
        self.steps[-1].pops.append(_Pop(key, index, decided, started))

    def expected(self, key: tuple[object, ...], index: int) -> None:
        """A group of expected submissions joined the run (``forecast_queue.Arrivals``)."""
        self.expected_groups[index] = key[1:-1]  # its decision key (without the EXPECTED marker)

    def same_run(self, other: Timeline) -> bool:
        """Whether ``other`` recorded the same run: the same ends and starts, at the same times, and the
        same heap (then a replay of either gives the same answers)."""

        def facts(t: Timeline) -> tuple[object, ...]:
            ends = [(e.at, e.placements, e.lq, e.cq, e.request) for e in t.ends]
            steps = [
                (s.at, [(e.at, e.placements) for e in s.released], [(p.key, p.index, p.decided) for p in s.pops])
                for s in t.steps
            ]
            return (t.groups, t.budget, t.left, ends, steps, _started(t))

        return facts(self) == facts(other)

    def finish(self, ends: list[_End], left: int, steps: int) -> None:
        self.ends = ends
        self.left = left
        for step in self.steps:
            self.events.extend((end, -1) for end in step.released)
            for pop in step.pops:
                pop.before = len(self.events)
                if pop.started is not None:
                    self.started_at[pop.started.job_id] = len(self.events)
                    self.events.append((pop.started, 1))
            step.after = len(self.events)


def _started(t: Timeline) -> list[tuple[object, ...]]:
    return [(p.started.at, p.started.placements) for s in t.steps for p in s.pops if p.started is not None]


class ReplayHost(Protocol):
    """What a replay needs of a cycle (``cycle._Cycle``): its state, its decision, and a copy of it."""

    cluster: Cluster
    quota: QuotaBook
    fair: FairShare
    holds: Holds

    def forecast_decide(self, job: Workload) -> Outcome: ...

    def forecast_begin(self) -> object: ...

    def forecast_step(self) -> None: ...

    def forecast_end(self, saved: object) -> None: ...


class _Cursor:
    """A copy of the cycle's state at ``pos`` events of the record."""

    def __init__(self, host: ReplayHost) -> None:
        self.host = host
        self.pos = 0

    def apply(self, end: _End, sign: int) -> None:
        for p in end.placements if sign > 0 else reversed(end.placements):
            self.host.cluster.apply(p, sign)
        if end.request:
            self.host.quota.add(end.cq, end.request, sign)
            self.host.fair.add(end.lq, end.cq, end.request, sign)

    def move(self, events: list[tuple[_End, int]], pos: int) -> None:
        while self.pos < pos:
            end, sign = events[self.pos]
            self.apply(end, sign)
            self.pos += 1
        while self.pos > pos:
            self.pos -= 1
            end, sign = events[self.pos]
            self.apply(end, -sign)

    def decide(self, job: Workload) -> Fit | None:
        """The forecast's decision for ``job`` on this state (a fresh step's memo); keeps nothing."""
        host = self.host
        saved = host.forecast_begin()
        try:
            host.forecast_step()
            outcome = host.forecast_decide(job)
            if not isinstance(outcome, Fit):
                return None
            for p in reversed(outcome.admission.placements):  # the decision took them
                host.cluster.apply(p, -1)
            return outcome
        finally:
            host.forecast_end(saved)


class Replay:
    """Answers for one record (see the module docstring). ``copy`` makes a copy of the cycle's final
    state (its capacity, quota, fair share and placer apart from the cycle's); ``models``: the GPU
    models whose capacity may let a job start (``estimate.Forecast._models``)."""

    def __init__(
        self,
        timeline: Timeline,
        copy: Callable[[], ReplayHost],
        fair: FairShare,
        models: Callable[[Workload, str], frozenset[str | None]],
        now: float,
        bound: Bound | None = None,
        reservations: tuple[Reservation, ...] = (),
        group_key: Callable[[Workload, str], tuple[object, ...]] = group_key,
        runtime: Callable[[Workload], float] | None = None,
    ) -> None:
        self.timeline = timeline
        self.reservations = reservations  # the cycle's (``reservations``), kept by the run
        self.group_key = group_key  # the run's groups (``estimate.Forecast.group_key``)
        self.runtime = runtime  # a job's expected runtime in the run (needed with reservations)
        self.copy = copy
        self.fair = fair  # the cycle's, read at the final state only
        self.models = models
        self.now = now
        self.bound = bound
        self.cursors: list[_Cursor] = []
        # The decisions taken so far: (point, what the decision depends on besides the state there) ->
        # the fit's GPU model and placements, None for no fit. Jobs of one shape are decided at the same
        # points (the next checks of a burst): the cursors are not moved there again.
        self.decided: dict[tuple[object, ...], tuple[str | None, tuple[ReplicaPlacement, ...]] | None] = {}
        # The points walked so far (``_points_of``): per group, (low, high, points) for the jobs
        # submitted between low and high.
        self.walked: dict[tuple[object, ...], list[tuple[float, float, list[tuple[float, int]]]]] = {}

    def __getstate__(self) -> dict[str, object]:
        """Pickled without the decisions taken and the points walked (a copy answers its own checks)."""
        return {**self.__dict__, "decided": {}, "walked": {}}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)

    def warm(self) -> None:
        """Make the copies now and park them spread along the record (each costs about a copy of the
        cycle's arrays, and moving it there), so that the first checks do not."""
        if len(self.cursors) >= CURSORS:
            return  # warm already, or parked by checks
        while len(self.cursors) < CURSORS:
            self.cursors.append(_Cursor(self.copy()))
        events = self.timeline.events
        for k, cursor in enumerate(self.cursors):
            cursor.move(events, len(events) * k // max(1, CURSORS - 1))

    def start(self, job: Workload, cq: str) -> Start | None:
        """When (and where) ``job`` of ClusterQueue ``cq`` would start in the recorded run, had it been
        waiting too (last in the waiting list); ``None``: beyond the run's reach. Changes nothing."""
        events = self.timeline.events
        tally: _Tally | None = None
        models = self.models(job, cq)
        decision = (replace(job, created_at=0.0), cq)  # its submission time only orders it (``_points``)
        for at, pos in self._points_of(job, cq):
            # With reservations the room held out depends on when it would end (``_decide``).
            held = (at, self.runtime(job)) if self.reservations and self.runtime is not None else ()
            key = (pos, decision, held)
            if key not in self.decided:
                if tally is None and self.bound is not None:
                    tally = self.bound.tally(events)
                if tally is not None and pos <= len(events) and not tally.may_fit(job, models, pos):
                    continue  # not enough room on any node it may use: the decision would be no
                if len(self.decided) >= DECIDED_KEPT:
                    self.decided.clear()
                self.decided[key] = self._decision(job, at, pos)
            found = self.decided[key]
            if found is not None:
                return Start(at, *found)
        return None

    def _points_of(self, job: Workload, cq: str) -> list[tuple[float, int]]:
        """``_points``, all of them, remembered: the walk depends on the job's group and queue, and on
        its submission time only where its order key ties with a recorded one up to the submission
        time (``_points``' bounds), so a job of the same group submitted between the same such times
        has the same points (the next checks of a burst)."""
        group = (self.group_key(job, cq), cq)
        at = job.created_at
        for low, high, points in self.walked.get(group, ()):
            if low < at < high:
                return points
        bounds = [float("-inf"), float("inf"), True]
        points = list(self._points(job, cq, bounds))
        if bounds[2]:  # no tie with a recorded job submitted at the same time
            kept = self.walked.setdefault(group, [])
            if len(kept) >= WALKS_KEPT:
                del kept[0]
            kept.append((bounds[0], bounds[1], points))
        return points

    def _decision(self, job: Workload, at: float, pos: int) -> tuple[str | None, tuple[ReplicaPlacement, ...]] | None:
        """The run's decision for ``job`` at ``pos`` (its step's time ``at``): the GPU model and
        placements of a fit, None for none."""
        cursor = self._cursor(pos)
        if pos > len(self.timeline.events):  # past the record: the ends left, given back here
            start = self._beyond(cursor, job, at, pos)
            return None if start is None else (start.gpu_model, start.placements)
        fit = self._decide(cursor, job, at, pos)
        return None if fit is None else (fit.admission.gpu_model, fit.admission.placements)

    def _decide(self, cursor: _Cursor, job: Workload, at: float, pos: int) -> Fit | None:
        """The run's decision at ``pos``: the reserved room the job must leave alone held out (the
        reservations whose job had not started by then and that apply to a job starting ``at``)."""
        if not self.reservations or self.runtime is None:
            return cursor.decide(job)
        started = self.timeline.started_at
        done = {r.job_id for r in self.reservations if started.get(r.job_id, pos) < pos}
        holds = cursor.host.holds
        holds.set(self.reservations, active(self.reservations, ends_at(job, at, self.runtime(job)), None, done))
        try:
            return cursor.decide(job)
        finally:
            holds.clear()

    def _cursor(self, pos: int) -> _Cursor:
        """The parked copy nearest ``pos`` (a new one while there are fewer than ``CURSORS``), moved
        there (within the record)."""
        events = self.timeline.events
        if len(self.cursors) < CURSORS and all(abs(c.pos - pos) > pos for c in self.cursors):
            self.cursors.append(_Cursor(self.copy()))
        cursor = min(self.cursors, key=lambda c: abs(c.pos - pos))
        cursor.move(events, min(pos, len(events)))
        return cursor

    def _points(self, job: Workload, cq: str, bounds: list | None = None) -> Iterator[tuple[float, int]]:
        """Where the run would decide ``job`` (its step's time, events before it), in order, while the
        budget lasts; the caller stops at the first where it fits. Positions past the record's events
        stand for the steps after it (``_beyond``). ``bounds``: ``[low, high, exact]``, narrowed to the
        submission times between which the same points come (its order key compared with a recorded
        one that ties with it up to the submission time: the submission time decided), ``exact`` False
        when one tied with it there too."""
        timeline = self.timeline
        models = self.models(job, cq)
        member = timeline.groups.get(self.group_key(job, cq))
        # Not a recorded group's: a group of its own, after every waiting job's group (an expected
        # submissions' group sharing the index never counts: ``ahead`` is 0).
        index, ahead = member if member is not None else (len(timeline.groups), 0)
        rank = timeline.waiting
        # Fair-share usage as the record goes: its order key's inputs (only its ClusterQueue's count).
        fair = copy.deepcopy(self.fair)
        used = 0  # decisions: the recorded ones and its own
        spare = spare_budget(timeline.budget)  # expected submissions' failures (``estimate.spare_budget``)
        tried_at = 0
        dirty = _Dirty(models)
        seen = 0  # jobs of its group started so far
        decision = self.group_key(job, cq)[1:]  # the cycle's memo key (with the priority, the stricter one)
        reserved = {r.job_id for r in self.reservations}
        shapes = {i: key[1:] for key, (i, _) in timeline.groups.items()} | timeline.expected_groups
        for step_no, step in enumerate(timeline.steps, start=1):
            failed: set[tuple[object, ...]] = set()  # decisions that failed in this step so far
            _charge(fair, cq, step.released, -1)
            dirty.came_back(step_no, step.models)
            mine = (order_key(fair, job, rank), index) if seen >= ahead and dirty.since(tried_at) else None
            for pop in [*step.pops, None]:
                if bounds is not None and mine is not None and pop is not None:
                    _bound(bounds, mine[0], pop.key)
                while mine is not None and (pop is None or mine < (pop.key, pop.index)):
                    if used >= timeline.budget:
                        return
                    fresh = (order_key(fair, job, rank), index)
                    if fresh != mine:
                        mine = fresh
                        if bounds is not None and pop is not None:
                            _bound(bounds, mine[0], pop.key)
                        continue
                    used += 1
                    tried_at = step_no
                    if decision not in failed:  # else the forecast's memo answers: it does not fit
                        yield step.at, pop.before if pop is not None else step.after
                    mine = None  # it did not fit: off the heap for this step
                if pop is None:
                    break
                if used >= timeline.budget:
                    return
                if pop.decided and pop.started is None and spare and pop.index in timeline.expected_groups:
                    spare -= 1  # an expected submission's failure: charged to its own budget
                else:
                    used += pop.decided
                if pop.started is None:
                    if pop.decided:
                        failed.add(shapes[pop.index])
                    continue
                _charge(fair, cq, (pop.started,), 1)
                if pop.started.job_id in reserved:
                    failed.clear()  # its room is no longer held: what failed may fit now
                if pop.index == index:
                    seen += 1
                    if seen == ahead:  # its group's last recorded job started: the job is its head now
                        tried_at = step_no
                        mine = (order_key(fair, job, rank), index)
        if timeline.left or not timeline.ends:
            return
        # Past the record (every waiting job had started): one decision per step where it may fit.
        ends = list(timeline.ends)
        step_no = len(timeline.steps)
        past = len(timeline.events)
        while ends and ends[0].at != NO_END and step_no < MAX_STEPS and used < timeline.budget:
            step_no += 1
            t, _, taken = pop_step(ends, self.now)
            came_back: set[str | None] = set()
            for end in taken:
                came_back |= end.models
            past += len(taken)
            dirty.came_back(step_no, came_back)
            if dirty.since(tried_at):
                used += 1
                tried_at = step_no
                yield t, past

    def _beyond(self, cursor: _Cursor, job: Workload, at: float, pos: int) -> Start | None:
        """The decision at ``pos`` past the record: the first ``pos - len(events)`` ends left by the
        record (in their order) given back on the cursor at the record's end, then taken again."""
        ends = list(self.timeline.ends)
        released = [heapq.heappop(ends) for _ in range(pos - len(self.timeline.events))]
        for end in released:
            cursor.apply(end, -1)
        try:
            fit = cursor.decide(job)
        finally:
            for end in reversed(released):
                cursor.apply(end, 1)
        return None if fit is None else Start(at, fit.admission.gpu_model, fit.admission.placements)


def _bound(bounds: list, mine: tuple[object, ...], recorded: tuple[object, ...]) -> None:
    """Narrow ``bounds`` (``Replay._points``) by one comparison of the job's order key ``mine`` with a
    recorded one: where they tie up to the submission time (index 3), the job's submission time
    decides it."""
    if mine[0] == recorded[0] and mine[1] == recorded[1] and mine[2] == recorded[2]:
        at, pivot = cast(float, mine[3]), cast(float, recorded[3])
        if pivot > at:
            bounds[1] = min(bounds[1], pivot)
        elif pivot < at:
            bounds[0] = max(bounds[0], pivot)
        else:
            bounds[2] = False


class _Dirty:
    """The forecast's rule for retrying a group: once capacity of a GPU model it may use came back
    (CPU-only work, ``None`` among its models: any end, every step)."""

    def __init__(self, models: frozenset[str | None]) -> None:
        self.models = models
        self.since_model: dict[str | None, int] = {}
        self.since_any = 0  # the last step CPU-only work ended (its CPU and memory help every model)

    def came_back(self, step: int, models: frozenset[str | None] | set[str | None]) -> None:
        for model in models:
            self.since_model[model] = step
        if None in models:
            self.since_any = step
        self.since_model[None] = step

    def since(self, tried_at: int) -> bool:
        return tried_at < max((self.since_any, *(self.since_model.get(m, 0) for m in self.models)))


def _charge(fair: FairShare, cq: str, ends: tuple[_End, ...] | list[_End], sign: int) -> None:
    """What ``ends`` hold, charged (1) or given back (-1) to ``fair``: only ``cq``'s usage, which is all
    a job of ``cq``'s order key reads."""
    for end in ends:
        if end.cq == cq and end.request:
            fair.add(end.lq, end.cq, end.request, sign)


class Bound:
    """Upper bounds of the room on each node along a record, cheap to move (numpy, no decisions): where
    a job's replicas do not fit even in them, the cycle's decision would not admit it, so the replay
    need not decide there. Fully free devices: exact for whole GPUs; a fraction given back may free its
    devices (counted free), one taken may use a device that was free (not counted). CPU and memory:
    exact. MIG and fraction requests are always decided."""

    def __init__(self, cluster: Cluster, shape_for: Callable[[Workload, str | None], Shape | str]) -> None:
        self.cluster = cluster
        self.shape_for = shape_for
        self.full_free = cluster.full_free.astype(np.int64)  # the final state's
        self.cpu_free = cluster.cpu_free.copy()
        self.mem_free = cluster.mem_free.copy()
        self.gpu_count = np.where(cluster.mig_node, 0, cluster.gpu_count)
        self._deltas: tuple[np.ndarray, ...] | None = None

    def deltas(self, events: list[tuple[_End, int]]) -> tuple[np.ndarray, ...]:
        """Per placement of the events in order: node, change of fully free devices, CPU, memory; and
        each event's first placement."""
        if self._deltas is None:
            c = self.cluster
            rows: list[tuple[int, int, int, int]] = []
            first = [0]
            for end, sign in events:
                for p in end.placements:
                    i = c.index.get(p.node)
                    if i is None:
                        continue
                    devices = sum(1 for d in p.gpu_indices if d < c.width)
                    full = 0
                    if not c.mig_node[i] and p.mig_profile is None and p.gpu_milli > 0:
                        whole = p.gpu_milli >= FULL
                        full = -sign * devices if whole or sign < 0 else 0
                    rows.append((i, full, -sign * p.cpu_milli, -sign * p.memory_mib))
                first.append(len(rows))
            table = np.array(rows, dtype=np.int64).reshape(-1, 4)
            self._deltas = (table[:, 0], table[:, 1], table[:, 2], table[:, 3], np.array(first))
        return self._deltas

    def tally(self, events: list[tuple[_End, int]]) -> _Tally:
        return _Tally(self, self.deltas(events))


class _Tally:
    """The bounds at one point of a record, moved forward only (``Bound``)."""

    def __init__(self, bound: Bound, deltas: tuple[np.ndarray, ...]) -> None:
        self.bound = bound
        self.deltas = deltas
        self.full = bound.full_free.copy()
        self.cpu_free = bound.cpu_free.copy()
        self.mem_free = bound.mem_free.copy()
        self.pos = 0

    def may_fit(self, job: Workload, models: frozenset[str | None], pos: int) -> bool:
        """Whether ``job``'s gang may fit at ``pos`` events on some model of ``models`` (False: it does
        not fit anywhere, by ``fit.replica_capacity`` over the bounds)."""
        nodes, full, cpu, mem, first = self.deltas
        if pos > self.pos:
            span = slice(first[self.pos], first[pos])
            np.add.at(self.full, nodes[span], full[span])
            np.add.at(self.cpu_free, nodes[span], cpu[span])
            np.add.at(self.mem_free, nodes[span], mem[span])
            self.pos = pos
        # What ``replica_capacity`` reads of a cluster, as bounds (fully free devices: at most all).
        view = SimpleNamespace(
            full_free=np.minimum(self.full, self.bound.gpu_count), cpu_free=self.cpu_free, mem_free=self.mem_free
        )
        cluster = self.bound.cluster
        for model in models:
            shape = self.bound.shape_for(job, model)
            if isinstance(shape, str):
                continue
            if shape.kind in ("fraction", "mig"):
                return True
            lo, hi = cluster.model_slice.get(model, (0, 0)) if model is not None else (0, cluster.n)
            if int(replica_capacity(cast(Cluster, view), shape, slice(lo, hi)).sum()) >= job.gang_size:
                return True
        return False
