"""The dry run: what the next cycle decides for a job that is not submitted, and when it starts.

``DryRun(snapshot, policy, now)`` runs one cycle (``cycle._Cycle``) and keeps its final state: the
state the next cycle starts from once this cycle's plan is applied. ``check(workload)`` then asks the
cycle's own steps about one more job, changing nothing:

1. Never fits as configured (``verdict``, the cycle's step 2) -> ``never``, with the limit.
2. The cycle's decision (``_Cycle.trial``: budget, quota with cohort borrowing, placement of the whole
   gang, else victims) on the final state:
   a. ``Fit`` -> ``runs_now``, with the GPU model and each replica's node and devices;
   b. ``Preempt`` -> ``waits`` for its victims to stop (named), starting then;
   c. ``NoFit`` -> ``waits``, with the cycle's reason and numbers.
3. Its position in its local queue: after every pending job there of higher or equal priority (it is
   the newest), before those of lower priority.
4. For ``waits``: the estimated starts, P50 and P90: where the cycle's forecast (``estimate``) would
   start the job had it been among the waiting ones, within the cycle's ``Policy.forecast_decisions``
   (beyond them: no estimate). The cycle recorded its two forecast runs; ``timeline.Replay`` replays
   the record up to each point where the job would be decided and decides it there, instead of
   running the forecast again (the same answer: ``test_timeline``); the forecast's admission also says
   which GPU model and nodes it would get (what its cost is priced on).

5. Jobs submitted after the snapshot was read (``later``; they are not in it) are decided first, as
   the next cycle would decide them before the job: those of its priority or higher, oldest first,
   each with the cycle's decision; from the first that fits or preempts on, on a copy of the final
   state (``_Cycle.clone``) that keeps what it decides (``trial(keep=True)``: a fit takes its room and
   quota, a preemption its victims; one that waits changes nothing). The job is then decided on that
   copy; its position counts those still waiting in its queue; and its estimated starts come from
   the forecast run again with them among the waiting jobs (the recorded runs do not hold them). A
   burst of submissions is thus told the truth: the first takes the free room, the next waits for
   it. The later jobs decided are kept for the next check (per priority) while they only grow (the
   next submission of a burst decides one more job; under a steady stream into a long queue nothing
   fits and no copy is made); one that commits after a newer one (many clients at once) is decided
   after those already kept rather than in its creation order, instead of deciding them all again.
   The forecast run stops after ``LATER_DECISIONS`` decisions: a job deeper in the queues gets the
   replayed starts, which leave the later jobs out.
   Suggestions then list only changes that run now (each other answer would cost a forecast run).

On a snapshot where the cycle still admits jobs, the job is decided after them (they are admitted
first when this cycle's plan is applied). Each ``check`` costs one decision and, for a waiting job,
a few more on copies of the state moved along the record: far less than a cycle
(``bench/bench_dryrun.py``); with later jobs, the copy (once per state) and a forecast run.

``suggestions`` tries the smallest changes to the request that start it sooner (each a ``check`` of
the changed job, its P50 start only): another GPU model the queue has quota for, half a GPU instead of
one, fewer replicas (down to its gang minimum... and the gang minimum halved).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from .collector import collector_paused
from .cycle import _Cycle
from .estimate import P50, P90, Start
from .forecast_queue import expected_runtime
from .model import Plan, Policy, Reason, ReasonKind, ReplicaPlacement, Resources, Snapshot, Workload, WorkloadState
from .outcome import Deferred, Fit, NoFit, Preempt
from .windows import opens_at

RUNS_NOW, WAITS, NEVER = "runs_now", "waits", "never"
LATER_COPIES = 3  # step 5's copies kept (one per priority asked about last)
LATER_DECISIONS = 100  # step 5's forecast run stops after this many decisions (then: the replayed starts)


@dataclass(frozen=True, slots=True)
class Check:
    """A dry run's answer for one job. Times are POSIX seconds in the cluster's clock."""

    verdict: str  # runs_now | waits | never
    gpu_model: str | None = None  # the model it runs (or is forecast to run) on
    placements: tuple[ReplicaPlacement, ...] = ()
    position: int | None = None  # 1-based in its local queue (waits)
    reason: Reason | None = None
    estimated_start_p50: float | None = None
    estimated_start_p90: float | None = None
    preempts: tuple[str, ...] = ()  # workload ids of its victims
    runtime_s: float = 0.0  # P50 expected runtime, cluster seconds
    runtime_p90_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Suggestion:
    """A change to the request (``change``: field -> new value, in the workload's words) and its answer."""

    message: str
    change: tuple[tuple[str, object], ...]
    check: Check


@dataclass(slots=True)
class _Later:
    """The final state with jobs submitted after the snapshot decided on it (step 5 of the module
    docstring): a copy of the cycle (None while none of them changed the state: each waits), the ids
    decided, and those still waiting (in the order decided)."""

    cycle: _Cycle | None = None
    ids: frozenset[str] = frozenset()
    waiting: list[tuple[Workload, str]] = field(default_factory=list)
    by_lq: dict[str, list[Workload]] = field(default_factory=dict)  # those waiting, per local queue


class DryRun:
    """One cycle's final state, kept to answer dry runs (see the module docstring)."""

    def __init__(self, snapshot: Snapshot, policy: Policy, now: float) -> None:
        self.now = now
        self.snapshot = snapshot
        self.cycle = _Cycle(snapshot, policy, now)
        with collector_paused():  # as ``run_cycle``: no collector passes over every live object meanwhile
            self.plan: Plan = self.cycle.run()
        # Its forecast runs, recorded, to replay; one replay for both when the runs were the same (no
        # runtime differs between P50 and P90): the same record gives the same answers.
        p50 = self.cycle.replay(P50)
        same = self.cycle.timelines[P90].same_run(self.cycle.timelines[P50])
        self._replays = (p50, p50 if same else self.cycle.replay(P90))
        # The jobs still pending in the final state (this cycle's admissions are not ahead of the job).
        still_pending = {p.workload_id for p in self.plan.pending}
        self._pending_by_lq: dict[str, list[Workload]] = {}
        for w in snapshot.workloads:
            if w.state == WorkloadState.PENDING and w.id in still_pending:
                self._pending_by_lq.setdefault(w.local_queue, []).append(w)
        self._later: dict[int, _Later] = {}  # step 5's copies by the job's priority, kept for the next check

    def __getstate__(self) -> dict[str, object]:
        """Shared between processes without step 5's copies (each process decides its later jobs)."""
        return {**self.__dict__, "_later": {}}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)

    def warm(self) -> None:
        """Make the replays' copies of the state now rather than in the first checks."""
        for replay in set(self._replays):
            replay.warm()

    def check(
        self,
        workload: Workload,
        runtimes: tuple[float, float] | None = None,
        later: Sequence[tuple[Workload, tuple[float, float] | None]] = (),
    ) -> Check:
        """The answer for ``workload`` (a pending job not in the snapshot, its id unused there);
        ``runtimes``: its (P50, P90) expected runtime in the cluster's seconds (default ``runtime_s``);
        ``later``: the pending jobs submitted after the snapshot was read, oldest first, each with its
        expected runtimes (step 5 of the module docstring)."""
        ahead = self._later_for(workload, later)
        cycle = self._cycle_of(ahead)
        if runtimes is None:
            return self._check(workload, ahead=ahead)
        cycle.runtimes[workload.id] = runtimes
        try:
            return self._check(workload, ahead=ahead)
        finally:
            del cycle.runtimes[workload.id]

    def suggestions(
        self,
        workload: Workload,
        check: Check,
        models: tuple[str, ...],
        later: Sequence[tuple[Workload, tuple[float, float] | None]] = (),
    ) -> tuple[Suggestion, ...]:
        """Changes that start ``workload`` sooner than ``check`` says, smallest first; ``models``: the
        GPU models its queue has quota for; ``later`` as for ``check``. Only for a job that does not
        run now."""
        if check.verdict == RUNS_NOW:
            return ()
        ahead = self._later_for(workload, later)
        out: list[Suggestion] = []
        for message, change, changed in self._variants(workload, models):
            # With later jobs a waiting answer costs a forecast run: only changes that run now count.
            answer = self._check(changed, p90=False, ahead=ahead, estimate=ahead is None)
            if _sooner(answer, check):
                out.append(Suggestion(message, change, answer))
        out.sort(key=lambda s: (s.check.verdict != RUNS_NOW, s.check.estimated_start_p50 or float("inf")))
        return tuple(out[:3])

    def _later_for(
        self, workload: Workload, later: Sequence[tuple[Workload, tuple[float, float] | None]]
    ) -> _Later | None:
        """Step 5's copy with the later jobs the next cycle decides before ``workload`` (its priority or
        higher) decided on it; None without any.

        The kept copy goes on while every job it decided is still among ``later``: the new ones are
        decided after them, in their order. Submissions that commit out of their creation order (a
        burst from many clients) are so decided in the order this process first saw them rather than
        oldest first; starting over for each would decide the whole burst again at every check."""
        ahead = [(w, r) for w, r in later if w.priority >= workload.priority and w.local_queue in self.cycle.lq_by_name]
        if not ahead:
            return None
        kept = self._later.get(workload.priority)  # one per priority: each decides its own subset
        if kept is None or not kept.ids.issubset(w.id for w, _ in ahead):  # one decided is gone
            kept = _Later()
            self._later.pop(workload.priority, None)
            while len(self._later) >= LATER_COPIES:
                del self._later[next(iter(self._later))]  # the oldest
            self._later[workload.priority] = kept
        new = [(w, r) for w, r in ahead if w.id not in kept.ids]
        for w, runtimes in new:
            cycle = self._cycle_of(kept)
            if runtimes is not None:  # its own id: kept on the cycle (no other job has it)
                cycle.runtimes[w.id] = runtimes
            outcome = cycle.trial(w, keep=kept.cycle is not None)
            if kept.cycle is None and isinstance(outcome, Fit | Preempt):
                # The first that changes the state: copied from here on (one that waits changes nothing).
                kept.cycle = self._copy()
                outcome = kept.cycle.trial(w, keep=True)
            if isinstance(outcome, NoFit) and not outcome.reason.waits:
                continue  # never fits: it waits for nothing
            if not isinstance(outcome, Fit):  # it waits (for room, quota, or its victims to stop)
                kept.waiting.append((w, self.cycle.lq_by_name[w.local_queue].cluster_queue))
                kept.by_lq.setdefault(w.local_queue, []).append(w)
        if new and kept.cycle is not None and kept.cycle._forecast is not None:
            # Its ends heap holds the earlier holders only; its expected submissions are still those.
            kept.cycle._forecast.ends_cache.clear()
        kept.ids = kept.ids.union(w.id for w, _ in new)
        return kept if kept.cycle is not None or kept.waiting else None

    def _copy(self) -> _Cycle:
        """A copy of the final state that step 5's decisions may change (``_Cycle.clone``, and the lists
        and runtimes a kept decision adds to)."""
        twin = self.cycle.clone()
        twin.holders = list(self.cycle.holders)
        twin.taken = set(self.cycle.taken)
        twin.runtimes = dict(self.cycle.runtimes)
        return twin

    def _cycle_of(self, ahead: _Later | None) -> _Cycle:
        """The cycle to decide on: step 5's copy, else the final state itself."""
        return ahead.cycle if ahead is not None and ahead.cycle is not None else self.cycle

    def _check(self, workload: Workload, p90: bool = True, ahead: _Later | None = None, estimate: bool = True) -> Check:
        """The answer; without ``p90`` its P90 start is left out (``None``: suggestions show P50 only),
        without ``estimate`` both; ``ahead``: step 5's later jobs, decided before it."""
        cycle = self._cycle_of(ahead)
        runtime = expected_runtime(workload, cycle.runtimes, P50)
        runtime_p90 = expected_runtime(workload, cycle.runtimes, P90)
        # 1.-2. The cycle's decision.
        outcome = cycle.trial(workload)
        base = Check(WAITS, runtime_s=runtime, runtime_p90_s=runtime_p90)
        match outcome:
            case NoFit(reason) if not reason.waits:
                return replace(base, verdict=NEVER, reason=reason)
            case Fit(admission, _):
                return replace(
                    base,
                    verdict=RUNS_NOW,
                    gpu_model=admission.gpu_model,
                    placements=admission.placements,
                    estimated_start_p50=self.now,
                    estimated_start_p90=self.now,
                )
            case Preempt(victims):
                names = tuple(v.holder.workload.id for v in victims)
                message = f"preempting: would wait for {len(names)} job(s) to stop: {', '.join(names)}"
                reason = Reason(ReasonKind.PREEMPTING, message, (("victims", len(names)), ("waits_for", "victims")))
                return replace(
                    base,
                    reason=reason,
                    position=self._position(workload, ahead),
                    preempts=names,
                    estimated_start_p50=self.now,
                    estimated_start_p90=self.now,
                )
            case NoFit(reason):
                pass
            case Deferred():  # pragma: no cover - trial decides a deferred job in the borrowing pass
                reason = Reason(ReasonKind.QUOTA, "quota: would have to borrow")
        # 3.-4. Position and forecast.
        check = replace(base, reason=reason, position=self._position(workload, ahead))
        if reason.kind == ReasonKind.BUDGET or not estimate:
            return check
        if reason.kind == ReasonKind.WINDOW and workload.start_window is not None:
            opens = opens_at(workload.start_window, self.now)  # the cycle's estimate for such a job
            return replace(check, estimated_start_p50=opens, estimated_start_p90=opens)
        cq = cycle.lq_by_name[workload.local_queue].cluster_queue
        early, late = self._starts(workload, cq, p90, ahead)
        if early is None:
            return check
        return replace(
            check,
            gpu_model=early.gpu_model,
            placements=early.placements,
            estimated_start_p50=early.at,
            estimated_start_p90=max(early.at, late.at) if late is not None else None,
        )

    def _starts(
        self, workload: Workload, cq: str, p90: bool, ahead: _Later | None
    ) -> tuple[Start | None, Start | None]:
        """Its estimated starts, P50 and P90 (None: beyond the forecast's reach; P90 also when not
        ``p90``): replayed from the cycle's recorded runs; with later jobs (step 5), from the forecast
        run again with them and the job last among the waiting jobs, on their copy. That run stops after
        ``LATER_DECISIONS`` decisions: a job deeper in the queues gets the replayed starts (which leave
        the later jobs out: a few among more than that many decisions ahead of it)."""
        if ahead is None:
            return self._replayed(workload, cq, p90)
        cycle = self._cycle_of(ahead)
        budget = LATER_DECISIONS
        waiting = [*cycle.waiting, *ahead.waiting, (workload, cq)]
        fixed = len(waiting) - 1  # those of the previous checks on this copy, and more: their groups made once
        early = cycle.forecast(waiting, P50, until=workload.id, max_decisions=budget, fixed=fixed).get(workload.id)
        if early is None:
            return self._replayed(workload, cq, p90)
        if not p90:
            return early, None
        spread = (cycle.runtimes.get(i, (0.0, 0.0)) for i in (*ahead.ids, workload.id))
        if self._replays[P50] is self._replays[P90] and all(p50 == p90 for p50, p90 in spread):
            return early, early  # the P90 run would be the P50 one (``_Cycle._plan``)
        late = cycle.forecast(waiting, P90, until=workload.id, max_decisions=budget, fixed=fixed).get(workload.id)
        return early, late

    def _replayed(self, workload: Workload, cq: str, p90: bool) -> tuple[Start | None, Start | None]:
        early = self._replays[P50].start(workload, cq)
        late = self._replays[P90].start(workload, cq) if p90 and early is not None else None
        return early, late

    def _position(self, workload: Workload, ahead: _Later | None = None) -> int:
        queued = [*self._pending_by_lq.get(workload.local_queue, [])]
        if ahead is not None:
            queued += ahead.by_lq.get(workload.local_queue, [])
        return 1 + sum(1 for w in queued if w.priority >= workload.priority)

    def _variants(
        self, w: Workload, models: tuple[str, ...]
    ) -> list[tuple[str, tuple[tuple[str, object], ...], Workload]]:
        res = w.resources
        variants: list[tuple[str, tuple[tuple[str, object], ...], Workload]] = []
        if res.wants_gpu:
            for model in models:
                if not w.allowed_gpu_models or model in w.allowed_gpu_models:
                    continue  # it may use that model already
                variants.append(
                    (f"run on {model}", (("allowed_gpu_models", (model,)),), replace(w, allowed_gpu_models=(model,)))
                )
        if res.gpu == 1:
            half = Resources(gpu_milli=500, cpu_milli=res.cpu_milli, memory_mib=res.memory_mib)
            variants.append(
                ("ask for half a GPU (gpu_milli 500)", (("gpu", 0), ("gpu_milli", 500)), replace(w, resources=half))
            )
        elif res.gpu > 1:
            fewer = replace(res, gpu=res.gpu // 2)
            variants.append(
                (
                    f"ask for {_count(res.gpu // 2, 'GPU')} per replica",
                    (("gpu", res.gpu // 2),),
                    replace(w, resources=fewer),
                )
            )
        if w.replicas > 1:
            n = max(1, w.replicas // 2)
            variants.append(
                (
                    f"run {_count(n, 'replica')}",
                    (("replicas", n), ("min_available", 0)),
                    replace(w, replicas=n, min_available=0),
                )
            )
        return variants


def _sooner(answer: Check, than: Check) -> bool:
    if answer.verdict == NEVER:
        return False
    if answer.verdict == RUNS_NOW:
        return True
    if answer.estimated_start_p50 is None:
        return False
    return than.estimated_start_p50 is None or answer.estimated_start_p50 < than.estimated_start_p50


def _count(n: int, noun: str) -> str:
    """``1 replica``, ``2 replicas``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"
