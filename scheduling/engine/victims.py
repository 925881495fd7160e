"""Which running jobs a pending job would preempt in a cycle (``cycle._Cycle``, step 3d).

``CycleVictims`` keeps what depends only on the workloads the cycle started with: the index of their
holders per queue (``preemption.VictimIndex``) and whether any is within its minimum runtime, both
built on first use. What decisions change (capacity, quota, the placer, the victims already taken) is
passed in per call (``VictimState``), so the cycle's clones (``_Cycle.clone``) share one
``CycleVictims``.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import podsets
from .capacity import Cluster
from .explain import preemption_why
from .fit import Shape
from .model import Preemption, Reason, ReasonKind, Workload
from .placement import Placer
from .preemption import Holder, Victim, VictimIndex, any_protected, protected_until, select_victims
from .probes import PlacementProbes
from .quota import QuotaBook, gpu_key


@dataclass(frozen=True, slots=True)
class VictimState:
    """The cycle's state a victim search reads: capacity, quota, placement, the victims taken so far,
    and whether it is the borrowing pass (which reclaims only from jobs of at most the job's priority:
    that pass orders them after it, so a victim is never re-admitted ahead of its preemptor)."""

    placer: Placer
    quota: QuotaBook
    cluster: Cluster
    taken: set[str]
    borrowing_pass: bool


class CycleVictims:
    def __init__(self, cohort_of: dict[str, str], now: float, serving_rule: bool) -> None:
        self.cohort_of = cohort_of
        self.now = now
        self.serving_rule = serving_rule
        self.holders: list[Holder] = []  # the cycle's holders as it started (step 1)
        self._index: VictimIndex | None = None
        self._any_protected: bool | None = None

    def select(
        self,
        job: Workload,
        cq: str,
        shape: Shape,
        request: dict[str, int],
        state: VictimState,
        min_runtime: bool = True,
    ) -> list[Victim] | None:
        """The victims ``job`` takes to start on ``shape`` (``preemption.select_victims``), or None."""
        sets = podsets.members(job, shape.gpu_model, state.placer.shape_for) if job.pod_sets else ()
        if isinstance(sets, str):
            return None
        probes = PlacementProbes(state.placer, job, shape, sets)
        if self._index is None:
            self._index = VictimIndex(self.holders, self.cohort_of, self.now)
        return select_victims(
            job=job,
            cq=cq,
            cohort=self.cohort_of.get(cq, ""),
            request=request,
            gpu_key=gpu_key(shape.gpu_model) if shape.gpu_model else None,
            index=self._index,
            taken=state.taken,
            quota=state.quota,
            cluster=state.cluster,
            now=self.now,
            fits=probes.fits,
            on_useful_node=probes.on_useful_node,
            frees_a_node=probes.frees_a_node,
            placed_on=probes.placed_on,
            serving_rule=self.serving_rule,
            min_runtime=min_runtime,
            reclaim_max_priority=job.priority if state.borrowing_pass else None,
        )

    def protected(
        self, job: Workload, cq: str, tried: list[tuple[Shape, dict[str, int]]], state: VictimState
    ) -> tuple[list[str], float] | None:
        """The victims the job would take if none were within its minimum runtime, when some are, and
        when the last of them reaches it."""
        if self._any_protected is None:
            self._any_protected = any_protected(self.holders, self.now)
        if not self._any_protected:
            return None
        for shape, minimum in tried:
            victims = self.select(job, cq, shape, minimum, state, min_runtime=False)
            until = protected_until(victims, self.now) if victims else None
            if victims and until is not None:
                return [v.holder.workload.id for v in victims], until
        return None


def preempting(job: Workload, cq: str, victims: tuple[Victim, ...]) -> tuple[list[Preemption], Reason]:
    """The preemptions of ``job`` (of ClusterQueue ``cq``) taking ``victims``, each with the rule that
    chose it, and the job's reason while it waits for them to stop."""
    preemptions = [Preemption(v.holder.workload.id, job.id, preemption_why(job, cq, v, len(victims))) for v in victims]
    names = ", ".join(p.workload_id for p in preemptions)
    message = f"preempting: waiting for {len(victims)} job(s) to stop: {names}"
    return preemptions, Reason(ReasonKind.PREEMPTING, message, (("victims", len(victims)), ("waits_for", "victims")))
