"""The forecast's waiting jobs and the submissions it expects (``estimate``'s step 3): which jobs a
forward run tries, in which groups and in which order (``group_key``, ``order_key``, the run's queue),
the submissions it expects (``Arrivals``, added period by period) and the ends in its heap (``_End``).
``estimate.Forecast`` runs over them (``QueueHost``: what the queue asks of it); ``timeline`` replays
what it recorded (``Recorder``).
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple, Protocol

from .admission import FairShare
from .model import ReplicaPlacement, Workload
from .reservations import Reservation
from .runtimes import upper_count

Runtimes = Mapping[str, tuple[float, float]]
"""Workload id -> (P50, P90) expected runtime in the cluster's seconds."""


def expected_runtime(job: Workload, runtimes: Runtimes, which: int, alias: Mapping[str, str] | None = None) -> float:
    """``job``'s expected runtime (``which``: P50 or P90); an expected submission (``alias``: its id ->
    the submission it repeats) runs as the submission it repeats."""
    known = runtimes.get(alias.get(job.id, job.id) if alias else job.id)
    return known[which] if known is not None else job.runtime_s


class _End(NamedTuple):
    """One end in the heap, ordered by ``(at, seq)``: ``seq`` is unique within a run, so the comparison
    never reaches the other fields (a tuple: the heap compares in C, not through a Python ``__lt__``)."""

    at: float
    seq: int
    placements: tuple[ReplicaPlacement, ...]
    lq: str
    cq: str
    request: dict[str, int]
    models: frozenset[str | None]
    job_id: str = ""  # the job that started (a forecast start)


class Recorder(Protocol):
    """What a run tells a recorder of its timeline (``timeline.Timeline``, which the dry run replays)."""

    def begin(self, groups: Mapping[tuple[object, ...], tuple[int, int]], budget: int) -> None: ...

    def step(self, at: float, released: list[_End]) -> None: ...

    def popped(self, key: tuple[object, ...], index: int, decided: bool, started: _End | None) -> None: ...

    def expected(self, key: tuple[object, ...], index: int) -> None: ...

    def finish(self, ends: list[_End], left: int, steps: int) -> None: ...


class QueueHost(Protocol):
    """What a run's queue asks of its forward run (``estimate.Forecast``)."""

    slot_keys: list[tuple[object, ...]]

    def group_key(self, job: Workload, cq: str, alias: Mapping[str, str] | None = None) -> tuple[object, ...]: ...

    def models(self, job: Workload, cq: str) -> frozenset[str | None]: ...

    def period_plan(self, k: int, upper: bool, made: list[tuple[Workload, str, str]]) -> _PeriodPlan: ...


@dataclass(frozen=True, slots=True)
class Arrivals:
    """Submissions the forecast expects (a persistence forecast: the next hours bring what the last
    ``period`` seconds brought). Each job of ``jobs`` (submitted within ``period`` before now, with its
    ClusterQueue, oldest first) is submitted again every ``period`` seconds, at its own submission
    time plus k periods, up to ``horizon`` seconds from now."""

    jobs: tuple[tuple[Workload, str], ...]
    period: float
    horizon: float
    upper_p90: bool = False  # the P90 run expects each queue's P90 count (``_Expected``)


EXPECTED = "expected"  # ends the group key of expected submissions


class _Queue:
    """The forecast's waiting jobs in groups of equal jobs (in the order of their first member).

    Expected submissions form groups of their own (``EXPECTED`` ends their key), never joining a group
    of waiting jobs: so adding one more waiting job (a dry run) leaves them where they were, and a
    replay of the recorded run (``timeline``) places it as the run itself would."""

    def __init__(self, forecast: QueueHost, seq: int) -> None:
        self.forecast = forecast
        self.groups: list[_Group] = []
        self.by_key: dict[tuple[object, ...], int] = {}  # a group's key -> its index
        self.by_slot: dict[int, int] = {}  # an expected group's slot (``Forecast.slots``) -> its index
        self.alias: dict[str, str] = {}  # an expected submission's id -> the submission it repeats
        self.rank = 0
        self.seq = seq  # the next end's tie-breaker
        self.recorder: Recorder | None = None

    def add(self, job: Workload, cq: str, expected: bool = False) -> _Group:
        key = self.forecast.group_key(job, cq, self.alias)
        key = (*key, EXPECTED) if expected else key
        index = self.by_key.get(key)
        group = self.groups[index] if index is not None else self._group(key, job, cq, expected)
        group.jobs.append((self.rank, job))
        self.rank += 1
        return group

    def add_period(self, plan: _PeriodPlan) -> int:
        """A period's expected copies added as ``add(copy, cq, expected=True)`` adds them one by one
        (the same groups, made in the same order, the same ranks), a group's share at once; returns
        the rank of the first."""
        first = self.rank
        for slot, offsets, copies, cq in plan.parts:
            index = self.by_slot.get(slot)
            if index is None:
                group = self._group(self.forecast.slot_keys[slot], copies[0], cq, True)
                group.jobs = _Ranked()
                index = self.by_slot[slot] = group.index
            jobs = self.groups[index].jobs
            assert isinstance(jobs, _Ranked)  # an expected group's
            jobs.add(first, offsets, copies)
        self.rank += len(plan.arrivals)
        self.alias.update(plan.alias)
        return first

    def _group(self, key: tuple[object, ...], job: Workload, cq: str, expected: bool) -> _Group:
        group = _Group(len(self.groups), cq, self.forecast.models(job, cq))
        self.by_key[key] = group.index
        self.groups.append(group)
        if expected and self.recorder is not None:
            self.recorder.expected(key, group.index)
        return group

    def fork(self, seq: int) -> _Queue:
        """A copy to run on (this one stays as it is), its ends counted from ``seq``."""
        twin = _Queue(self.forecast, seq)
        twin.groups = [_Group(g.index, g.cq, g.models, list(g.jobs)) for g in self.groups]
        twin.by_key = dict(self.by_key)  # keeps the keys' hashes: no key is hashed again
        twin.by_slot = dict(self.by_slot)
        twin.alias = dict(self.alias)
        twin.rank = self.rank
        return twin


class _Expected:
    """Adds ``Arrivals``' period k once the forecast reaches its start (now + (k-1) periods).

    ``upper``: each local queue's submissions scaled to the P90 of its next period's count
    (``runtimes.upper_count`` of its ``n`` last period): its r-th job (0-based) comes
    ``floor((r + 1) f) - floor(r f)`` times (``f`` = that count / ``n``), the extra ones ``period / (n f)``
    apart after it (the P90 run: more submissions than the last period's, as likely as not fewer)."""

    def __init__(
        self,
        arrivals: Arrivals,
        now: float,
        upper: bool = False,
        copies: dict[tuple[int, bool], list[tuple[Workload, str, str]]] | None = None,
    ) -> None:
        self.arrivals = arrivals
        self.now = now
        self.upper = upper
        self.made = copies if copies is not None else {}  # (period, upper) -> its copies (``period_copies``)
        self.k = 1
        self.copies: list[tuple[int, float]] = [(1, 0.0)] * len(arrivals.jobs)  # per job: copies, spacing
        if upper:
            count: dict[str, int] = {}
            for job, _ in arrivals.jobs:
                count[job.local_queue] = count.get(job.local_queue, 0) + 1
            rank: dict[str, int] = {}
            for i, (job, _) in enumerate(arrivals.jobs):
                n, r = count[job.local_queue], rank.get(job.local_queue, 0)
                rank[job.local_queue] = r + 1
                f = upper_count(n) / n
                self.copies[i] = (math.floor((r + 1) * f) - math.floor(r * f), arrivals.period / (n * f))

    def due(self, ends: list[_End], queue: _Queue) -> None:
        """Add the periods that begin before the next end: their jobs join ``queue`` (after every job
        submitted before them) and their arrivals join ``ends`` (they give nothing back)."""
        period, horizon = self.arrivals.period, self.arrivals.horizon
        while period > 0 and (begins := (self.k - 1) * period) < horizon:
            if ends and ends[0].at <= self.now + begins:
                return
            made = self.made.get((self.k, self.upper))
            if made is None:
                made = self.made[(self.k, self.upper)] = self.period_copies()
            plan = queue.forecast.period_plan(self.k, self.upper, made)
            queue.add_period(plan)
            # Their arrivals: ends that give nothing back, numbered from ``queue.seq`` (a heap with unique
            # (at, seq): pushed one by one or heapified, it pops in the same order).
            ends.extend(plan.ends_from(queue.seq))
            heapq.heapify(ends)
            queue.seq += len(plan.arrivals)
            self.k += 1

    def period_copies(self) -> list[tuple[Workload, str, str]]:
        """Period ``k``'s submissions, in order: each a copy of the job it repeats (its own id, submitted
        at its time in the period), with its ClusterQueue and the id it repeats."""
        period, horizon, made = self.arrivals.period, self.arrivals.horizon, []
        for (job, cq), (copies, spacing) in zip(self.arrivals.jobs, self.copies, strict=True):
            for c in range(copies):
                at = job.created_at + self.k * period + c * spacing
                if self.now < at <= self.now + horizon:
                    copy = replace(job, id=f"{job.id}@{self.k}" + (f".{c}" if c else ""), created_at=at)
                    made.append((copy, cq, job.id))
        return made


@dataclass(frozen=True, slots=True)
class _PeriodPlan:
    """How one period's expected copies join a run's queue (``Forecast.period_plan``): per group (its
    slot, in the order the copies first come), the copies' offsets among the period's and the copies,
    with their ClusterQueue; each copy's id -> the submission it repeats; each copy's arrival (its
    submission time, local queue, ClusterQueue and its group's GPU models), in order."""

    parts: list[tuple[int, list[int], list[Workload], str]]
    alias: dict[str, str]
    arrivals: list[tuple[float, str, str, frozenset[str | None]]]
    made: dict[int, list[_End]] = field(default_factory=dict)  # ``ends_from``'s, by their first number

    def ends_from(self, seq: int) -> list[_End]:
        """The arrivals as ends numbered from ``seq`` (the runs of one state often start them at the
        same number: made once for it)."""
        ends = self.made.get(seq)
        if ends is None:
            if len(self.made) >= 4:
                self.made.clear()
            ends = self.made[seq] = [
                _End(at, seq + n, (), lq, cq, {}, models) for n, (at, lq, cq, models) in enumerate(self.arrivals)
            ]
        return ends


class _Ranked:
    """An expected group's ``(rank, job)`` list, added a period's share at a time: each share's ranks
    (its first rank plus the copies' offsets) are read when a job is, not made for every copy."""

    __slots__ = ("n", "shares", "starts")

    def __init__(self) -> None:
        self.n = 0
        self.starts: list[int] = []  # each share's first index
        self.shares: list[tuple[int, list[int], list[Workload]]] = []

    def add(self, first: int, offsets: list[int], copies: list[Workload]) -> None:
        self.starts.append(self.n)
        self.shares.append((first, offsets, copies))
        self.n += len(copies)

    def append(self, item: tuple[int, Workload]) -> None:
        self.add(item[0], [0], [item[1]])

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[tuple[int, Workload]]:
        return (self[i] for i in range(self.n))

    def __getitem__(self, i: int) -> tuple[int, Workload]:
        k = bisect.bisect_right(self.starts, i) - 1
        first, offsets, copies = self.shares[k]
        j = i - self.starts[k]
        return first + offsets[j], copies[j]


@dataclass(slots=True)
class _Group:
    index: int
    cq: str
    models: frozenset[str | None]
    jobs: list[tuple[int, Workload]] | _Ranked = field(default_factory=list)
    head: int = 0
    tried_at: int = 0


def _order_key(fair: FairShare, group: _Group) -> tuple[int, float, float, float, int]:
    """``admission.AdmissionOrder``'s key of the group's first waiting job (its rank breaks ties)."""
    rank, job = group.jobs[group.head]
    return order_key(fair, job, rank)


def order_key(fair: FairShare, job: Workload, rank: int) -> tuple[int, float, float, float, int]:
    """The forecast's admission order of ``job``, ``rank``-th of the waiting jobs, as usage stands."""
    lq = job.local_queue
    return (-job.priority, fair.cq_share(fair.lq_cq.get(lq, "")), fair.lq_share(lq), job.created_at, rank)


def decision_key(job: Workload, cq: str, priority: int) -> tuple[object, ...]:
    """What the cycle's decision for a job depends on besides the state (the cycle's memo key, with
    ``priority`` when preemption may use it): jobs with equal keys get equal decisions."""
    return (
        cq,
        job.resources,
        job.replicas,
        job.gang_size,
        job.allowed_gpu_models,
        job.node_selector,
        job.tolerations,
        job.rules,
        priority,
        job.pod_sets,
        job.kind,
    )


@dataclass(frozen=True, slots=True)
class RunKeys:
    """One run's (``which``: P50 or P90) expected runtime and group of a job, for the dry run's replay
    (a plain object: the dry run's kept state is pickled)."""

    runtimes: Runtimes
    which: int
    reservations: tuple[Reservation, ...]

    def runtime(self, job: Workload) -> float:
        return expected_runtime(job, self.runtimes, self.which)

    def group_key(self, job: Workload, cq: str) -> tuple[object, ...]:
        return run_group_key(job, cq, self.reservations, self.runtime(job))


def run_group_key(job: Workload, cq: str, reservations: Sequence[Reservation], runtime: float) -> tuple[object, ...]:
    """A run's group of ``job`` expected to run ``runtime``: with reservations, jobs of one group must
    also leave the same reservations alone (the same runtime) and a reserved job is a group of its own."""
    if not reservations:
        return group_key(job, cq)
    reserved = any(r.job_id == job.id for r in reservations)
    return group_key(job, cq, (runtime, job.id if reserved else ""))


def group_key(job: Workload, cq: str, extra: tuple[object, ...] = ()) -> tuple[object, ...]:
    """The forecast's groups: equal decisions, one local queue (its order within the queue); ``extra``:
    what else tells them apart (``Forecast.group_key``)."""
    return (job.local_queue, *decision_key(job, cq, job.priority), *extra)
