"""When would it start: the cycle's step 4 (the forward runs from its final state, ``estimate.Forecast``,
and their recordings replayed for the dry run) and the cycle as the forecast's host (``estimate.Host``).

``ForecastHost`` is a part of ``cycle._Cycle``: its methods read and set the cycle's own state,
declared below for the type checker (``_Cycle.__init__`` sets it).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Self

from .cycle_plan import expected_arrivals
from .estimate import Forecast, Start
from .forecast_queue import Arrivals, RunKeys
from .model import Workload
from .outcome import Memo, Outcome
from .reservations import Holds
from .timeline import Bound, Replay, Timeline

if TYPE_CHECKING:
    from .admission import FairShare
    from .capacity import Cluster
    from .model import LocalQueue, Policy, Snapshot
    from .placement import Placer
    from .preemption import Holder
    from .quota import QuotaBook
    from .reservations import Reservation
    from .verdict import Feasibility


class ForecastHost:
    if TYPE_CHECKING:
        snapshot: Snapshot
        policy: Policy
        now: float
        cluster: Cluster
        quota: QuotaBook
        fair: FairShare
        placer: Placer
        feasibility: Feasibility
        holds: Holds
        memo: Memo
        stats: dict[str, int | float]
        preemptors: dict[str, int]
        may_preempt: bool
        explaining: bool
        holders: list[Holder]
        taken: set[str]
        lq_by_name: dict[str, LocalQueue]
        blocked: dict[str, str]
        runtimes: dict[str, tuple[float, float]]
        running_runtimes: dict[str, tuple[float, float]]
        reservations: list[Reservation]
        timelines: tuple[Timeline, Timeline]
        _forecast: Forecast | None
        _expected: Arrivals | None
        _borrowing: dict[int, tuple[int, bool, tuple[dict[str, int], ...]]]
        _quota_misses: dict[tuple[bool, int], int]

        def _decide(self, job: Workload, borrow: bool) -> Outcome: ...

    def _same_runtimes(self) -> bool:
        """Whether no job's P90 expected runtime differs from its P50 one (``Snapshot.runtimes``; a job
        without an entry runs its requested ``runtime_s`` in both): then the two forecast runs are one.
        Teams with fewer than three finished runs have no spread (``runtimes.runtime_from_history``)."""
        return all(p50 == p90 for runtimes in (self.runtimes, self.running_runtimes) for p50, p90 in runtimes.values())

    def forecast(
        self,
        waiting: list[tuple[Workload, str]],
        which: int,
        until: str | None = None,
        recorder: Timeline | None = None,
        max_decisions: int | None = None,
        fixed: int = 0,
    ) -> dict[str, Start]:
        """Step 4's forward run from the final state (``estimate.Forecast``); changes nothing.
        ``max_decisions``: fewer than the policy's (``Policy.forecast_decisions``); ``fixed``: as
        ``Forecast.run``'s (the dry run: the cycle's own waiting jobs come first in every check)."""
        budget = self.policy.forecast_decisions
        if max_decisions is not None:
            budget = min(budget, max_decisions)
        return self._forecaster().run(
            waiting,
            self.holders,
            self.taken,
            which,
            until,
            max_decisions=budget,
            recorder=recorder,
            arrivals=self._arrivals(),
            reservations=self.reservations,
            fixed=fixed,
        )

    def replay(self, which: int) -> Replay:
        """Step 4's run (P50 or P90) as recorded, to ask when one more job would start in it."""
        bound = Bound(self.cluster, self.placer.shape_for)
        keys = RunKeys(self.runtimes, which, tuple(self.reservations))
        return Replay(
            self.timelines[which],
            self.clone,
            self.fair,
            self._forecaster().models,
            self.now,
            bound,
            reservations=keys.reservations,
            group_key=keys.group_key,
            runtime=keys.runtime,
        )

    def _forecaster(self) -> Forecast:
        if self._forecast is None:
            self._forecast = Forecast(self, self.now, self.runtimes, self.quota.flavors, self.running_runtimes)
        return self._forecast

    def release(self) -> None:
        """Break the reference cycles among the cycle's state (the forecast's host is this cycle; the
        scorers listen to the cluster they hold), so that it is freed by reference counting once nothing
        refers to the cycle, not left to the garbage collector (see ``collector_paused``). Only
        ``run_cycle`` calls it: the dry run keeps its cycle."""
        self.cluster.listeners.clear()
        self._forecast = None

    def clone(self) -> Self:
        """This cycle with its own copy of the state that decisions change (capacity, quota, fair
        share, the placer and its scorers); the snapshot and its jobs are shared."""
        twin = copy.copy(self)
        shared = (self.snapshot, self.cluster.nodes, *self.cluster.nodes, *self.snapshot.workloads)
        memo: dict[int, object] = {id(x): x for x in shared}
        state = (self.cluster, self.placer, self.quota, self.fair, self.feasibility)
        twin.cluster, twin.placer, twin.quota, twin.fair, twin.feasibility = copy.deepcopy(state, memo)
        twin.holds = Holds(twin.cluster)  # the final state holds nothing back
        twin.memo = Memo(requests=dict(self.memo.requests))
        twin.stats = dict(self.stats)
        twin.preemptors = dict(self.preemptors)
        twin._borrowing = {}  # read at the quota's change counts, which the copies count apart
        twin._quota_misses = {}
        twin._forecast = None
        return twin

    def _arrivals(self) -> Arrivals | None:
        """The submissions the forecast expects (``cycle_plan.expected_arrivals``), built once."""
        if self._expected is None:
            self._expected = expected_arrivals(
                self.snapshot.recent, self.lq_by_name, self.blocked, self.feasibility, self.policy, self.now
            )
        return self._expected if self._expected.jobs and self._expected.period > 0 else None

    # -- the forecast's host (``estimate.Host``) and the dry run's trial ------------------------------

    def forecast_begin(self) -> object:
        saved = (self.memo, dict(self.stats), self.may_preempt, self.explaining)
        self.may_preempt = self.explaining = False
        return saved

    def forecast_step(self) -> None:
        """Capacity came back: what failed before may fit now."""
        self.memo = Memo(requests=self.memo.requests)

    def forecast_end(self, saved: object) -> None:
        self.memo, self.stats, self.may_preempt, self.explaining = saved  # type: ignore[misc]

    def forecast_decide(self, job: Workload) -> Outcome:
        return self._decide(job, borrow=True)
