"""One scheduling cycle: ``plan = run_cycle(snapshot, policy, now)``.

Steps (each is one call in :meth:`_Cycle.run`):

1. Build free capacity (``capacity.Cluster``) from admitted and running workloads' placements and
   ``snapshot.foreign``; build quota usage (``quota.QuotaBook``) and fair-share usage from the same
   workloads. With the platform's toleration allow-list in the snapshot, a pending job's tolerations
   its team was not granted do not count (``taints.toleration_allowed``).
2. Set aside each pending workload that never fits the cluster as configured
   (``verdict.Feasibility``: an invalid request, no quota for its models, more than its queue's
   ceiling, a replica bigger than any node, a GPU model or MIG profile no node offers, a gang bigger
   than all its nodes): its reason says so (``Reason.waits`` false) and it gets no estimated start.
   A workload outside its start window (``windows``: start after, daily hours) waits with reason
   ``window``; its estimated start is the window's next opening.
3. Walk pending workloads in admission order (``admission.AdmissionOrder``: priority, fair share,
   submission time), twice: first only jobs that fit their ClusterQueue's nominal quota, then the
   ones that need to borrow (Kueue's rule; without it a job preempted to reclaim lent quota would
   borrow it straight back in the next cycle). A job of lower priority than one its ClusterQueue
   deferred is deferred with it (admitted first, it would take the room the deferred job preempts it
   for in the borrowing pass, again every cycle). Each job gets an ``outcome.Outcome``:
   a. the team may not start new jobs -> ``NoFit`` (reason ``budget``);
   b. a job of the same shape in the same ClusterQueue already failed this cycle -> the same outcome
      (capacity and quota only shrink during a cycle, so it would fail again);
   c. try each allowed GPU model in the ClusterQueue's flavor order: quota (with cohort borrowing),
      then placement of the gang in a ``Statement``; the first model where both succeed -> ``Fit``
      (a workload of several pod sets, a Ray cluster, needs quota and room for all of them: ``podsets``);
   d. otherwise, if the policy allows, select victims (``preemption.select_victims``) on the first
      model where that works -> ``Preempt`` (reason ``preempting``; the job starts in a later cycle);
   e. otherwise, in the first pass, a job that would have to borrow -> ``Deferred`` to the second;
      else ``NoFit`` with the reason from the first model that had quota (placement or gang), else
      quota.
   Backfill reservations (``reservations``): the first ``Policy.reserved_jobs`` jobs whose outcome is
   a placement or gang ``NoFit`` get a reservation, the whole GPUs they get at their shadow time (the
   forecast of what runs now and the reservations before theirs); while a later job is decided, the
   free part of every reservation it would still run at the shadow time of is held out of the cluster
   (``Holds``), so it starts only in what is left (its reason says what was held).
4. Position in its queue and estimated starts, P50 and P90 (``estimate.Forecast``: this cycle's
   decision run forward over its final state), for every workload still pending.

After ``run`` the cycle keeps its final state: a dry run (``dryrun``) decides one more job on it with
the same steps, keeping nothing (``trial``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

from . import podsets
from .admission import AdmissionOrder, FairShare, SortKey, sort_key
from .capacity import Cluster, Statement
from .collector import collector_paused
from .cycle_forecast import ForecastHost
from .cycle_plan import plan_of, waiting_jobs
from .estimate import P50, P90, Forecast, Start, ends_at
from .explain import (
    gang_reason,
    placement_reason,
    protected_reason,
    quota_shortfall,
    window_reason,
)
from .fit import Shape
from .forecast_queue import Arrivals, decision_key, expected_runtime
from .frag.plugins import workload_mix
from .holdings import held_per_queue, load_running
from .model import (
    Admission,
    Plan,
    Policy,
    Preemption,
    Reason,
    ReasonKind,
    ReplicaPlacement,
    Snapshot,
    Workload,
    WorkloadState,
)
from .outcome import NOT_EXPLAINED, Deferred, Fit, Memo, Misses, NoFit, Outcome, Preempt
from .placement import Placer
from .preemption import Holder, Victim
from .quota import QuotaBook, models_to_try, request_of
from .reservations import Holds, Reservation, active, held_reason, reservable
from .standing import capacity_totals
from .taints import granted_snapshot
from .timeline import Timeline
from .verdict import Feasibility
from .victims import CycleVictims, VictimState, preempting
from .windows import opens_at

RESERVED_KINDS = (ReasonKind.PLACEMENT, ReasonKind.GANG)  # waiting for capacity: may get a reservation


class _ModelTry(NamedTuple):
    """A job on one GPU model as step 3c needs it, the same for every job of its decision key."""

    shape: Shape
    sets: tuple[podsets.Member, ...]  # further pod sets (``podsets``)
    minimum: dict[str, int]  # the gang's minimum quota request (read only)
    one: dict[str, int]  # one replica's quota request (read only)
    place: int  # the number of what placement depends on besides the state


def run_cycle(snapshot: Snapshot, policy: Policy, now: float) -> Plan:
    """Decide which pending workloads start, where, what to preempt, and why the others wait.

    Pure and deterministic: the same snapshot, policy (including its seed) and ``now`` give the same
    plan. Admitted and running workloads are never moved; they only leave as preemption victims.

    CPython's cyclic garbage collector is paused while the cycle runs (``collector_paused``) and the
    cycle's state is released by reference counting when it returns (``_Cycle.release``).
    """
    with collector_paused():
        return _run(snapshot, policy, now)


def _run(snapshot: Snapshot, policy: Policy, now: float) -> Plan:
    """The cycle, released when it returns: its state is freed before the collector resumes."""
    cycle = _Cycle(snapshot, policy, now)
    try:
        return cycle.run()
    finally:
        cycle.release()


def set_aside(job: Workload, feasibility: Feasibility, now: float) -> tuple[Reason, float | None] | None:
    """Step 2 for one pending job: (its reason, its fixed estimated start) if it never fits as
    configured (no start) or waits for its start window (the window's next opening), else None."""
    never = podsets.never_fits(job, feasibility.never_fits)
    if never is not None:
        return never, None
    if job.start_window is not None and (opens := opens_at(job.start_window, now)) > now:
        return window_reason(job.start_window, opens), opens
    return None


class _Cycle(ForecastHost):
    def __init__(self, snapshot: Snapshot, policy: Policy, now: float) -> None:
        snapshot = granted_snapshot(snapshot)
        self.snapshot = snapshot
        self.policy = policy
        self.now = now
        self.cluster = Cluster(snapshot)
        self.quota = QuotaBook(snapshot.cluster_queues)
        self.lq_by_name = {lq.name: lq for lq in snapshot.local_queues}
        self.cohort_of = {cq.name: cq.cohort for cq in snapshot.cluster_queues}
        self.blocked = dict(snapshot.teams_blocked)
        # Built before any usage is applied: stateful scorers mirror every change of the cluster.
        self.placer = Placer(self.cluster, policy, dict(snapshot.mig_profiles), workload_mix(snapshot, policy))
        self.fair = FairShare(snapshot.cluster_queues, snapshot.local_queues, self._nominal(), self._capacity())
        self.feasibility = Feasibility(
            self.cluster, self.placer.filters, self.quota, self.lq_by_name, self.placer.shape_for
        )
        self.holders: list[Holder] = []
        self.victims = CycleVictims(self.cohort_of, now, policy.inference_preempts_training)
        self.admissions: list[Admission] = []
        self.preemptions: list[Preemption] = []
        self.pending: dict[str, tuple[Reason, float | None]] = {}  # reason, fixed estimated start
        self.considered: list[Workload] = []
        self.taken: set[str] = set()  # victims chosen this cycle
        self.preemptors: dict[str, int] = {}
        self.memo = Memo()
        # Step 3's borrowing pass order (``_borrows``) per decision key number: the quota's change count
        # when it was taken, whether the job would borrow then, and its minimums.
        self._borrowing: dict[int, tuple[int, bool, tuple[dict[str, int], ...]]] = {}
        # The forecast's decisions (no reasons, no preemption) that failed on quota alone on every GPU model,
        # per (borrow, decision key number): the quota's change count then. While neither the queue's
        # usage nor its cohort's changed since, the job fails again (``_decide``).
        self._quota_misses: dict[tuple[bool, int], int] = {}
        self.stats: dict[str, int | float] = {"placement_attempts": 0, "cache_hits": 0}
        # The forecast and the dry run decide more jobs on the cycle's final state: the forecast keeps
        # what fits and never preempts; the dry run keeps nothing (``Statement.discard``).
        self.may_preempt = True
        self.keep_fits = True
        self.explaining = True  # the forecast needs only fit or not: no reasons
        self.runtimes = {wid: (p50, p90) for wid, p50, p90 in snapshot.runtimes}
        self.running_runtimes = {wid: (p50, p90) for wid, p50, p90 in snapshot.running_runtimes}
        self.waiting: list[tuple[Workload, str]] = []  # step 4's jobs, in the cycle's order
        self.forecasts: tuple[dict[str, Start], dict[str, Start]] = ({}, {})  # step 4's, P50 and P90
        self.timelines = (Timeline(), Timeline())  # step 4's runs, recorded for the dry run to replay
        self._forecast: Forecast | None = None  # built in step 4, after the last admission
        # Step 3's backfill reservations (``reservations``), in the order they were made, with their
        # jobs; while a job is decided, the reserved room it must leave alone is held out (``holds``).
        self.reservations: list[Reservation] = []
        self.reserved: list[tuple[Workload, str]] = []
        self.holds = Holds(self.cluster)
        self._expected: Arrivals | None = None  # the forecast's expected submissions, built once
        # Per job (by object; the entry keeps the job alive, so its id stays its own): the number of its
        # ``decision_key`` (one per distinct key: the memo keys hash a number, not the key's fields).
        self._job_keys: dict[int, tuple[Workload, int]] = {}
        self._key_numbers: dict[tuple[object, ...], int] = {}
        self._place_numbers: dict[tuple[object, ...], int] = {}  # the same for ``_ModelTry.place``
        # Per (job key number, GPU model): what step 3c derives from the job alone (``_model_try``).
        self._model_tries: dict[tuple[int, str | None], _ModelTry | str] = {}

    def run(self) -> Plan:
        # 1. Free capacity, quota usage and fair-share usage of what runs.
        self._load_running()
        # 2. Requests no cycle can fix.
        pending = self._valid_pending()
        # 3. Admission order, nominal pass then borrowing pass: an outcome per job.
        self._admit(pending)
        # 4. Positions and estimated starts of the jobs still pending.
        return self._plan()

    # -- 1. state ---------------------------------------------------------------------------------

    def _nominal(self) -> dict[str, dict[str, int]]:
        return {cq: {key: limit.nominal for key, limit in limits.items()} for cq, limits in self.quota.limits.items()}

    def _capacity(self) -> dict[str, int]:
        return capacity_totals(self.cluster)

    def _load_running(self) -> None:
        self.holders = load_running(self.snapshot, self.cluster, self.lq_by_name, self.placer.shape_for)
        # Usage is additive, so one update per queue gives the same book as one per workload.
        for (lq_name, cq), totals in sorted(held_per_queue(self.holders).items()):
            self.quota.add(cq, totals)
            self.fair.add(lq_name, cq, totals)
        self.victims.holders = list(self.holders)

    # -- 2. invalid requests ----------------------------------------------------------------------

    def _valid_pending(self) -> dict[str, list[Workload]]:
        """Pending workloads by LocalQueue; those that never fit as configured get their reason."""
        by_lq: dict[str, list[Workload]] = {}
        for w in self.snapshot.workloads:
            if w.state != WorkloadState.PENDING:
                continue
            aside = set_aside(w, self.feasibility, self.now)
            if aside is not None:
                self.pending[w.id] = aside
                continue
            by_lq.setdefault(w.local_queue, []).append(w)
        return by_lq

    # -- 3. admission -----------------------------------------------------------------------------

    def _admit(self, pending: dict[str, list[Workload]]) -> None:
        # Pass 1: only jobs that fit their queue's nominal quota (Kueue's rule: not borrowing goes
        # first), so quota reclaimed by preemption goes to the queue that reclaimed it, not back to the
        # borrower. Pass 2: the rest, allowed to borrow.
        # A job of lower priority than one its ClusterQueue deferred waits for pass 2 too: admitted in
        # pass 1 it would take the room the deferred job may preempt it for, every cycle (a loop).
        deferred: dict[str, list[Workload]] = {}
        deferred_top: dict[str, int] = {}  # per ClusterQueue: the first (highest) priority deferred
        order = AdmissionOrder(pending, self.fair, fair_sharing=True)
        for job in order:
            cq = self.lq_by_name[job.local_queue].cluster_queue
            if job.priority < deferred_top.get(cq, job.priority) or isinstance(
                self._consider(job, borrow=False, at=(0, order.last_key)), Deferred
            ):
                deferred.setdefault(job.local_queue, []).append(job)
                deferred_top.setdefault(cq, job.priority)
            else:
                self.considered.append(job)
        # In pass 2, of equal priority, a job that now fits its queue's nominal quota goes before one
        # that would borrow (else a borrower takes the room and the other reclaims it next cycle).
        order = AdmissionOrder(deferred, self.fair, fair_sharing=True, borrows=self._borrows, changes=self.quota)
        for job in order:
            self.considered.append(job)
            self._consider(job, borrow=True, at=(1, order.last_key))
        self.holds.clear()  # the final state holds nothing back
        self.stats["reservations"] = len(self.reservations)

    def _borrows(self, job: Workload) -> bool:
        """Whether every GPU model the job may use would make its queue borrow now."""
        cq = self.lq_by_name[job.local_queue].cluster_queue
        # The answer depends on the job's minimums, the same for every job of its decision key (``_job_key``),
        # and on the queue's usage: kept per key while the queue's usage stays as it was.
        number = self._job_key(job, cq)
        quota = self.quota
        kept = self._borrowing.get(number)
        if kept is None:
            minimums = self._minimums(job, cq)
        elif quota.unchanged_since(kept[0], cq):
            return kept[1]
        else:
            minimums = kept[2]
        would_borrow = quota.would_borrow
        borrows = all(would_borrow(cq, minimum) for minimum in minimums)
        self._borrowing[number] = (quota.changes, borrows, minimums)
        return borrows

    def _minimums(self, job: Workload, cq: str) -> tuple[dict[str, int], ...]:
        """The gang's minimum request on each GPU model it may use in ``cq`` (models where it cannot
        exist left out), memoised for the cycle: it depends only on the fields in the key."""
        key = (cq, job.resources, job.pod_sets, job.allowed_gpu_models, job.gang_size)
        minimums = self.memo.minimums.get(key)
        if minimums is None:
            out = []
            for model in models_to_try(job, self.quota.flavors[cq]):
                shape = self.placer.shape_for(job, model)
                sets = podsets.members(job, model, self.placer.shape_for)
                if not isinstance(shape, str) and not isinstance(sets, str):
                    out.append(podsets.total_request(self._request(shape, job.gang_size), sets))
            minimums = self.memo.minimums[key] = tuple(out)
        return minimums

    def _consider(self, job: Workload, borrow: bool, at: tuple[int, SortKey | None]) -> Outcome:
        """Decide one job (``at``: its pass and its key in the admission order) and record the outcome;
        a job waiting for capacity may get a reservation."""
        self._hold(job, len(self.reservations))
        outcome = self._decide(job, borrow)
        match outcome:
            case Fit(admission, request):
                self.admissions.append(admission)
                self._take(job, admission.placements, request)
            case Preempt(victims):
                self._preempt(job, victims)
            case NoFit(reason):
                self.pending[job.id] = (reason, None)
                if len(self.reservations) < self.policy.reserved_jobs and reason.kind in RESERVED_KINDS:
                    self._reserve(job, at)
        return outcome

    def _take(self, job: Workload, placements: tuple[ReplicaPlacement, ...], request: dict[str, int]) -> None:
        """An admitted job takes its quota and fair share and holds its room (its placements were
        committed on the cluster by the decision)."""
        cq = self.lq_by_name[job.local_queue].cluster_queue
        self.quota.add(cq, request)
        self.fair.add(job.local_queue, cq, request)
        self.holders.append(Holder(job, job.local_queue, cq, request, placements))

    def _hold(self, job: Workload, before: int) -> None:
        """Hold out the room of the first ``before`` reservations ``job`` must leave alone: those it
        would still run at the shadow time of (``reservations.applies``, its P50 expected runtime)."""
        if self.reservations:
            end = ends_at(job, self.now, expected_runtime(job, self.runtimes, P50))
            self.holds.set(self.reservations, active(self.reservations, end, before))

    def _reserve(self, job: Workload, at: tuple[int, SortKey | None]) -> None:
        """Reserve for ``job`` the room it gets at its shadow time: its start in the forecast of the
        jobs running now and the reserved jobs before it (their reservations kept), those jobs alone.
        Whole GPUs only (a fraction or MIG slice starts on the first device that frees up)."""
        self.holds.clear()
        cq = self.lq_by_name[job.local_queue].cluster_queue
        forecast = Forecast(self, self.now, self.runtimes, self.quota.flavors, self.running_runtimes)
        waiting = [*self.reserved, (job, cq)]
        starts = forecast.run(waiting, self.holders, self.taken, P50, until=job.id, reservations=self.reservations)
        start = starts.get(job.id)
        if start is not None and reservable(start.placements):
            order = (at[0], *(at[1] or ()))
            self.reservations.append(Reservation(job.id, start.at, start.gpu_model, start.placements, order))
            self.reserved.append((job, cq))

    def _decide(self, job: Workload, borrow: bool) -> Outcome:
        cq = self.lq_by_name[job.local_queue].cluster_queue
        # a. Budget.
        why = self.blocked.get(job.team)
        if why is not None:
            message = f"budget: team {job.team} may not start new jobs" + (f": {why}" if why else "")
            return NoFit(Reason(ReasonKind.BUDGET, message, (("team", job.team), ("waits_for", "budget"))))
        # b. The same job failed already.
        number = self._job_key(job, cq)
        key = (borrow, self.holds.indices, number)
        cached = self.memo.failed.get(key)
        if cached is not None:
            self.stats["cache_hits"] += 1
            return cached
        if not self.explaining and not self.may_preempt:
            stamp = self._quota_misses.get((borrow, number))
            if stamp is not None and self.quota.room_unchanged_since(stamp, cq):
                self.stats["cache_hits"] += 1
                return NOT_EXPLAINED
        # c.-e.
        outcome = self._attempt(job, cq, borrow, number)
        if isinstance(outcome, NoFit | Deferred):
            self.memo.failed[key] = outcome
        return outcome

    def _job_key(self, job: Workload, cq: str) -> int:
        """The number of ``job``'s ``decision_key`` in ``cq`` (equal keys, equal numbers)."""
        entry = self._job_keys.get(id(job))
        if entry is None or entry[0] is not job:
            key = decision_key(job, cq, job.priority if self.policy.preemption else 0)
            number = self._key_numbers.setdefault(key, len(self._key_numbers))
            entry = self._job_keys[id(job)] = (job, number)
        return entry[1]

    def _model_try(self, job: Workload, number: int, model: str | None) -> _ModelTry | str:
        """Step 3c's view of ``job`` (its decision key's ``number``, ``_job_key``) on ``model`` (or why its
        request cannot exist there), derived once per decision key and model: it depends only on the
        key's fields."""
        key = (number, model)
        found = self._model_tries.get(key)
        if found is None:
            shape = self.placer.shape_for(job, model)
            sets = podsets.members(job, model, self.placer.shape_for)  # a gang of several pod sets (podsets)
            if isinstance(shape, str) or isinstance(sets, str):
                found = shape if isinstance(shape, str) else str(sets)
            else:
                gang = job.gang_size
                place = (shape, job.node_selector, job.tolerations, job.rules, gang, job.pod_sets)
                found = _ModelTry(
                    shape,
                    sets,
                    podsets.total_request(self._request(shape, gang), sets),
                    self._request(shape, 1),
                    self._place_numbers.setdefault(place, len(self._place_numbers)),
                )
            self._model_tries[key] = found
        return found

    def _attempt(self, job: Workload, cq: str, borrow: bool, number: int) -> Outcome:
        """Steps 3c-e for ``job`` (its decision key's ``number``, ``_job_key``)."""
        models = models_to_try(job, self.quota.flavors[cq])  # not empty: step 2 refused jobs without any
        misses = Misses()
        # c. Quota, then placement, model by model.
        for model in models:
            fit = self._try_model(job, cq, model, borrow, misses, number)
            if fit is not None:
                return fit
        # d. Victims.
        if (
            self.may_preempt
            and self.policy.preemption
            and self.preemptors.get(cq, 0) < self.policy.preemptors_per_queue
        ):
            preempt = self._try_preemption(job, cq, misses.tried, borrow)
            if preempt is not None:
                return preempt
            if self.explaining and not misses.deferrable:
                misses.protected = self.victims.protected(job, cq, misses.tried, self._victim_state(borrow))
        # e. Deferred to the borrowing pass, or the reason.
        if misses.deferrable:
            return Deferred()
        if not self.explaining:
            if not misses.fitting and not self.may_preempt:  # no model had quota: only quota can change that
                self._quota_misses[(borrow, number)] = self.quota.changes
            return NOT_EXPLAINED
        reason = self._reason(job, misses)
        if self.holds.taken:
            reason = held_reason(reason, self.holds, self.reservations)
        if misses.protected is not None:
            reason = protected_reason(reason, *misses.protected, self.now)
        return NoFit(reason)

    def _try_model(
        self, job: Workload, cq: str, model: str | None, borrow: bool, misses: Misses, number: int
    ) -> Fit | None:
        tried = self._model_try(job, number, model)
        if isinstance(tried, str):
            misses.invalid.append(tried)
            return None
        shape, sets, minimum, one, place = tried
        if not borrow and self.quota.would_borrow(cq, minimum):
            misses.deferrable = True
            return None
        if sets:
            needed = self.quota.room_for_all(cq, minimum, job.replicas, borrow)
        else:
            needed = self.quota.replicas_with_room(cq, one, job.replicas, borrow)
        misses.tried.append((shape, minimum))
        if needed < job.gang_size:
            if self.explaining:  # the forecast needs no reason
                misses.quota.append(quota_shortfall(self.quota, cq, self.cohort_of.get(cq, ""), minimum))
            return None
        misses.fitting.append(shape)
        # The same shape and filters failed already (whatever the queue): the number of
        # (shape, node selector, tolerations, rules, gang size, pod sets).
        pkey = (place, self.holds.indices)
        if pkey in self.memo.placement_failed:
            self.stats["cache_hits"] += 1
            misses.placement = misses.placement or self.memo.placement_failed[pkey]
            return None
        stmt = Statement(self.cluster)
        self.stats["placement_attempts"] += 1
        result = self.placer.place_gang(
            job, shape, stmt, needed, job.gang_size, explain=self.explaining and job.gang_size > 1
        )
        if result.explanation is None:
            more, failed = podsets.place(sets, stmt, self.placer.place_gang)
            if failed is not None:
                self.memo.placement_failed[pkey] = failed
                misses.placement = misses.placement or failed
                return None
            if self.keep_fits:
                stmt.commit()
            else:
                stmt.discard()
            request = podsets.total_request(self._request(shape, len(result.placements)), sets)
            borrowed = self.quota.would_borrow(cq, request)
            return Fit(Admission(job.id, model, result.placements + more, borrowed), request)
        failure = None
        if job.gang_size > 1 and result.fit_count:
            failure = gang_reason(result.fit_count, job.gang_size, self.cluster.n, result.explanation, result.within)
        self.memo.placement_failed[pkey] = failure
        misses.placement = misses.placement or failure
        return None

    def _try_preemption(
        self, job: Workload, cq: str, tried: list[tuple[Shape, dict[str, int]]], borrow: bool
    ) -> Preempt | None:
        for shape, minimum in tried:
            # the kind too: the serving rule lets an inference replica preempt more
            key: tuple[object, ...] = (cq, job.priority, shape, job.node_selector, job.tolerations, job.rules)
            key += (job.gang_size, job.kind, job.pod_sets, borrow)
            if key in self.memo.preemption_failed:
                continue
            victims = self.victims.select(job, cq, shape, minimum, self._victim_state(borrow))
            if victims:
                self.preemptors[cq] = self.preemptors.get(cq, 0) + 1
                return Preempt(tuple(victims))
            self.memo.preemption_failed.add(key)
        return None

    def _reason(self, job: Workload, misses: Misses) -> Reason:
        """The placement (or gang) reason of the first model that had quota, else the quota reason."""
        failure = misses.placement
        if misses.fitting and failure is None:
            key = (tuple(misses.fitting), job.node_selector, job.tolerations, job.rules, self.holds.indices)
            failure = self.memo.explained.get(key)
            if failure is None:
                explanation = self.placer.explain(job, misses.fitting)
                failure = self.memo.explained[key] = placement_reason(self.cluster.n, explanation)
        return misses.reason(failure)

    def _request(self, shape: Shape, count: int) -> dict[str, int]:
        """``request_of`` memoised for the cycle (callers never mutate the result)."""
        key = (shape, count)
        request = self.memo.requests.get(key)
        if request is None:
            request = self.memo.requests[key] = request_of(shape, count)
        return request

    def _victim_state(self, borrowing_pass: bool) -> VictimState:
        return VictimState(self.placer, self.quota, self.cluster, self.taken, borrowing_pass)

    def _preempt(self, job: Workload, victims: tuple[Victim, ...]) -> None:
        cq = self.lq_by_name[job.local_queue].cluster_queue
        preemptions, reason = preempting(job, cq, victims)
        self.taken.update(p.workload_id for p in preemptions)
        self.preemptions += preemptions
        self.pending[job.id] = (reason, self.now)

    # -- 4. the plan ------------------------------------------------------------------------------

    def _plan(self) -> Plan:
        self.waiting = waiting_jobs(self.considered, self.pending, self.lq_by_name)
        p50 = self.forecast(self.waiting, P50, recorder=self.timelines[P50])
        arrivals = self._arrivals()
        same = self._same_runtimes()
        if same and (arrivals is None or not arrivals.upper_p90):
            # Every expected runtime is its P50 and its P90 at once, and the P90 run expects the same
            # submissions: it would take the same decisions on the same state, so its starts and its
            # record are the P50 run's.
            self.timelines = (self.timelines[P50], self.timelines[P50])
            self.forecasts = (p50, p50)
        else:
            self.forecasts = (p50, self.forecast(self.waiting, P90, recorder=self.timelines[P90]))
        stats = {**self.stats, "nodes": self.cluster.n, "pending_considered": len(self.considered)}
        return plan_of(self.snapshot.workloads, self.pending, self.admissions, self.preemptions, self.forecasts, stats)

    def trial(self, job: Workload, keep: bool = False) -> Outcome:
        """Steps 2 and 3 for one more pending ``job`` on the final state: what the next cycle decides for
        it when nothing else changes (``dryrun``). A job that never fits is a ``NoFit`` whose reason has
        ``waits`` false. Keeps nothing, unless ``keep`` (a job submitted after the snapshot, decided on
        a ``clone`` before the dry run's job): then a fit takes its room, quota and fair share, and a
        preemption its victims, as in step 3."""
        job = granted_snapshot(replace(self.snapshot, workloads=(job,))).workloads[0]
        aside = set_aside(job, self.feasibility, self.now)
        if aside is not None:
            return NoFit(aside[0])
        saved = (dict(self.preemptors), self.keep_fits)
        self.keep_fits = keep
        try:
            # The reservations made before its place in the order (as it stands on the final state).
            self._hold(job, self._reserved_before((0, *sort_key(self.fair, job))))
            outcome = self._decide(job, borrow=False)
            if isinstance(outcome, Deferred):
                self._hold(job, self._reserved_before((1, *sort_key(self.fair, job, self._borrows(job)))))
                outcome = self._decide(job, borrow=True)
        finally:
            self.holds.clear()
            self.preemptors, self.keep_fits = saved
        if keep:
            match outcome:
                case Fit(admission, request):
                    self._take(job, admission.placements, request)
                case Preempt(victims):
                    self.taken.update(v.holder.workload.id for v in victims)
            if isinstance(outcome, Fit | Preempt):
                # What it took changes the numbers a failure's reason gives (the free room left): the
                # failures learnt before are learnt again, as the next cycle, deciding it first, would.
                self.memo = Memo(requests=self.memo.requests, minimums=self.memo.minimums)
        return outcome

    def _reserved_before(self, order: tuple[object, ...]) -> int:
        """How many reservations the cycle had made when it reached ``order`` (pass, admission key)."""
        return sum(1 for r in self.reservations if r.order < order)


__all__ = ["request_of", "run_cycle"]
