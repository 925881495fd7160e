"""One scheduling cycle: ``plan = run_cycle(snapshot, policy, now)``.

Steps:

1. Build free capacity (``capacity.Cluster``) from admitted and running workloads' placements and
   ``snapshot.foreign``; build quota usage (``quota.QuotaBook``) and fair-share usage from the same
   workloads.
2. Check each pending workload for things no cycle can fix (unknown queue, impossible request):
   reason ``invalid``.
3. Walk pending workloads in admission order (``admission.AdmissionOrder``: priority, fair share,
   submission time), twice: first only jobs that fit their ClusterQueue's nominal quota, then the
   ones that need to borrow (Kueue's rule; without it a job preempted to reclaim lent quota would
   borrow it straight back in the next cycle). For each:
   a. the team may not start new jobs -> reason ``budget``;
   b. a job of the same shape in the same ClusterQueue already failed this cycle -> same reason
      (capacity and quota only shrink during a cycle, so it would fail again);
   c. try each allowed GPU model in the ClusterQueue's flavor order: quota (with cohort borrowing),
      then placement of the gang in a ``Statement``; the first model where both succeed wins;
   d. otherwise, if the policy allows, select victims (``preemption.select_victims``) on the first
      model where that works: reason ``preempting``, and the job starts in a later cycle;
   e. otherwise the reason from the first model that had quota (placement or gang), else quota.
4. Estimated start for every pending workload (``explain.StartEstimator``), position in its queue.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .admission import AdmissionOrder, FairShare, lq_order_key
from .capacity import FULL, Cluster, Statement
from .explain import StartEstimator, gang_reason, placement_reason, quota_reason
from .mig import default_device_memory_gib, devices_for_memory
from .model import (
    Admission,
    PendingInfo,
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
from .placement import Placer
from .preemption import Holder, Victim, VictimIndex, select_victims
from .quota import CPU, MEMORY, QuotaBook, gpu_key
from .scorers import Shape


def run_cycle(snapshot: Snapshot, policy: Policy, now: float) -> Plan:
    """Decide which pending workloads start, where, what to preempt, and why the others wait.

    Pure and deterministic: the same snapshot, policy (including its seed) and ``now`` give the same
    plan. Admitted and running workloads are never moved; they only leave as preemption victims.
    """
    return _Cycle(snapshot, policy, now).run()


@dataclass(slots=True)
class _Attempt:
    admission: Admission | None = None
    request: dict[str, int] | None = None
    reason: Reason | None = None
    victims: list[Victim] | None = None
    cacheable: bool = True
    deferred: bool = False


_DEFERRED = Reason(ReasonKind.ORDER, "deferred to the borrowing pass")  # internal marker, never in a plan


def request_of(shape: Shape, count: int) -> dict[str, int]:
    """Quota charge of ``count`` replicas of ``shape``, by resource key (zero amounts left out)."""
    request: dict[str, int] = {}
    if shape.gpu_model is not None and shape.quota_milli:
        request[gpu_key(shape.gpu_model)] = shape.quota_milli * count
    if shape.cpu_milli:
        request[CPU] = shape.cpu_milli * count
    if shape.memory_mib:
        request[MEMORY] = shape.memory_mib * count
    return request


class _Cycle:
    def __init__(self, snapshot: Snapshot, policy: Policy, now: float) -> None:
        self.snapshot = snapshot
        self.policy = policy
        self.now = now
        self.cluster = Cluster(snapshot)
        self.quota = QuotaBook(snapshot.cluster_queues)
        self.cq_by_name = {cq.name: cq for cq in snapshot.cluster_queues}
        self.lq_by_name = {lq.name: lq for lq in snapshot.local_queues}
        self.cohort_of = {cq.name: cq.cohort for cq in snapshot.cluster_queues}
        self.blocked = dict(snapshot.teams_blocked)
        # The workload mix only matters to fragmentation-aware scorers; it costs a pass over all jobs.
        names = {policy.placement, *(name for _, name in policy.pool_placement)}
        typical = _typical_shapes(snapshot) if names - {"binpack", "spread", "random"} else ()
        self.placer = Placer(self.cluster, policy, dict(snapshot.mig_profiles), typical)
        for usage in snapshot.foreign:
            self.cluster.apply_foreign(usage, refresh=False)
        nominal = {
            cq: {key: limit.nominal for key, limit in limits.items()} for cq, limits in self.quota.limits.items()
        }
        self.fair = FairShare(snapshot.cluster_queues, snapshot.local_queues, nominal, self._capacity())
        self.holders: list[Holder] = []
        held_by_lq: dict[tuple[str, str], dict[str, int]] = {}
        for w in snapshot.workloads:
            if w.state == WorkloadState.PENDING:
                continue
            for p in w.placements:
                self.cluster.apply(p, 1, refresh=False)
            lq = self.lq_by_name.get(w.local_queue)
            cq = lq.cluster_queue if lq is not None else ""
            request = self._held(w)
            totals = held_by_lq.setdefault((w.local_queue, cq), {})
            for key, amount in request.items():
                totals[key] = totals.get(key, 0) + amount
            self.holders.append(Holder(w, w.local_queue, cq, request, w.placements))
        # Usage is additive, so one update per queue gives the same book as one per workload.
        for (lq_name, cq), totals in sorted(held_by_lq.items()):
            self.quota.add(cq, totals)
            self.fair.add(lq_name, cq, totals)
        self.cluster.refresh_all()
        self._victim_index: VictimIndex | None = None  # built on the first preemption attempt
        self._initial_holders = list(self.holders)
        self.admissions: list[Admission] = []
        self.preemptions: list[Preemption] = []
        self.pending: dict[str, tuple[Reason, float | None]] = {}
        self.considered: list[Workload] = []
        self.taken: set[str] = set()
        self.failed: dict[tuple[object, ...], Reason] = {}
        # Placement only gets harder during a cycle, so a failure holds for every later job of the
        # same shape and filters, whatever its queue (value: a gang reason, or None = explain later).
        self.placement_failed: dict[tuple[object, ...], Reason | None] = {}
        self.explained: dict[tuple[object, ...], Reason] = {}
        self.preemption_failed: set[tuple[object, ...]] = set()
        self.preemptors: dict[str, int] = {}
        self._requests: dict[tuple[Shape, int], dict[str, int]] = {}
        self.stats: dict[str, int | float] = {"placement_attempts": 0, "cache_hits": 0}

    # -- setup helpers ----------------------------------------------------------------------------

    def _capacity(self) -> dict[str, int]:
        c = self.cluster
        capacity = {CPU: int(c.cpu_total.sum()), MEMORY: int(c.mem_total.sum())}
        for model, code in c.model_code.items():
            capacity[gpu_key(model)] = int(c.gpu_count[c.node_model == code].sum()) * FULL
        return capacity

    def _held(self, w: Workload) -> dict[str, int]:
        """Quota a running workload holds, from its placements (or its request if it has none)."""
        if w.placements:
            return self._placements_request(w, w.placements)
        shape = self.placer.shape_for(w, w.gpu_model)
        if isinstance(shape, str):
            return {}
        return request_of(shape, w.replicas)

    def _placements_request(self, w: Workload, placements: tuple[ReplicaPlacement, ...]) -> dict[str, int]:
        """What ``placements`` of ``w`` hold, by resource key (zero amounts left out)."""
        request: dict[str, int] = {}
        for p in placements:
            model = w.gpu_model or self._model_of(p.node)
            if p.gpu_indices and model:
                if p.mig_profile:
                    geometry = self.cluster.mig(p.mig_profile, self.cluster.memory_of(model))
                    milli = geometry.gpu_milli if geometry else 0
                else:
                    milli = p.gpu_milli
                key = gpu_key(model)
                request[key] = request.get(key, 0) + milli * len(p.gpu_indices)
            request[CPU] = request.get(CPU, 0) + p.cpu_milli
            request[MEMORY] = request.get(MEMORY, 0) + p.memory_mib
        return {k: v for k, v in request.items() if v}

    def _model_of(self, node: str) -> str | None:
        i = self.cluster.index.get(node)
        return None if i is None else self.cluster.nodes[i].gpu_model

    # -- the cycle --------------------------------------------------------------------------------

    def run(self) -> Plan:
        by_lq: dict[str, list[Workload]] = {}
        for w in self.snapshot.workloads:
            if w.state != WorkloadState.PENDING:
                continue
            invalid = self._invalid(w)
            if invalid is not None:
                self.pending[w.id] = (Reason(ReasonKind.INVALID, invalid), None)
                continue
            by_lq.setdefault(w.local_queue, []).append(w)
        # Pass 1: only jobs that fit their queue's nominal quota (Kueue's rule: not borrowing goes
        # first), so quota reclaimed by preemption goes to the queue that reclaimed it, not back to the
        # borrower. Pass 2: the rest, allowed to borrow.
        deferred: dict[str, list[Workload]] = {}
        for job in AdmissionOrder(by_lq, self.fair, fair_sharing=True):
            if self._consider(job, borrow=False):
                deferred.setdefault(job.local_queue, []).append(job)
            else:
                self.considered.append(job)
        for job in AdmissionOrder(deferred, self.fair, fair_sharing=True):
            self.considered.append(job)
            self._consider(job, borrow=True)
        return self._plan()

    def _invalid(self, w: Workload) -> str | None:
        lq = self.lq_by_name.get(w.local_queue)
        if lq is None:
            return f"invalid: local queue {w.local_queue} does not exist"
        if lq.cluster_queue not in self.cq_by_name:
            return f"invalid: cluster queue {lq.cluster_queue} of {lq.name} does not exist"
        res = w.resources
        kinds = sum(bool(x) for x in (res.gpu, res.gpu_milli, res.mig_profile, res.gpu_memory_gib))
        if kinds > 1:
            return "invalid: ask for whole GPUs, a GPU fraction, a MIG profile or GPU memory, not several"
        if res.gpu_milli and not 0 < res.gpu_milli < FULL:
            return f"invalid: gpu_milli must be between 1 and 999, got {res.gpu_milli}"
        if min(res.gpu, res.gpu_milli, res.gpu_memory_gib, res.cpu_milli, res.memory_mib) < 0:
            return "invalid: negative resource request"
        if w.replicas < 1 or not 0 <= w.min_available <= w.replicas:
            return f"invalid: replicas={w.replicas}, min_available={w.min_available}"
        return None

    def _consider(self, job: Workload, borrow: bool) -> bool:
        """Decide one job; returns True when it is deferred to the borrowing pass."""
        lq = self.lq_by_name[job.local_queue]
        why = self.blocked.get(job.team)
        if why is not None:
            message = f"budget: team {job.team} may not start new jobs" + (f": {why}" if why else "")
            self.pending[job.id] = (Reason(ReasonKind.BUDGET, message, (("team", job.team),)), None)
            return False
        cq = lq.cluster_queue
        key = (
            borrow,
            cq,
            job.resources,
            job.replicas,
            job.gang_size,
            job.allowed_gpu_models,
            job.node_selector,
            job.tolerations,
            job.priority if self.policy.preemption else 0,
        )
        cached = self.failed.get(key)
        if cached is not None:
            self.stats["cache_hits"] += 1
            if cached is _DEFERRED:
                return True
            self.pending[job.id] = (cached, None)
            return False
        attempt = self._attempt(job, cq, borrow)
        if attempt.deferred:
            self.failed[key] = _DEFERRED
            return True
        if attempt.admission is not None and attempt.request is not None:
            self.admissions.append(attempt.admission)
            self.quota.add(cq, attempt.request)
            self.fair.add(job.local_queue, cq, attempt.request)
            self.holders.append(Holder(job, job.local_queue, cq, attempt.request, attempt.admission.placements))
            return False
        if attempt.victims:
            self._preempt(job, attempt)
            return False
        assert attempt.reason is not None
        self.pending[job.id] = (attempt.reason, None)
        if attempt.cacheable:
            self.failed[key] = attempt.reason
        return False

    def _models(self, job: Workload, cq: str) -> list[str | None]:
        if not job.resources.wants_gpu:
            return [None]
        flavors = [f.gpu_model for f in self.cq_by_name[cq].flavors]
        if job.allowed_gpu_models:
            allowed = set(job.allowed_gpu_models)
            return [m for m in flavors if m in allowed]
        return list(flavors)

    def _attempt(self, job: Workload, cq: str, borrow: bool) -> _Attempt:
        models = self._models(job, cq)
        if not models:
            wanted = ", ".join(job.allowed_gpu_models) or "any GPU"
            return _Attempt(
                reason=Reason(
                    ReasonKind.QUOTA,
                    f"quota: queue {cq} has no quota for {wanted}",
                    (("cluster_queue", cq),),
                )
            )
        quota_reasons: list[Reason] = []
        deferrable = False
        placement_failure: Reason | None = None
        invalid: list[str] = []
        fitting_shapes: list[Shape] = []
        tried: list[tuple[Shape, dict[str, int]]] = []
        for model in models:
            shape = self.placer.shape_for(job, model)
            if isinstance(shape, str):
                invalid.append(shape)
                continue
            minimum = self._request(shape, job.gang_size)
            if not borrow and self.quota.would_borrow(cq, minimum):
                deferrable = True
                continue
            needed = self._quota_count(cq, shape, job.gang_size, job.replicas, borrow)
            tried.append((shape, minimum))
            if needed < job.gang_size:
                quota_reasons.append(self._quota_reason(cq, minimum))
                continue
            fitting_shapes.append(shape)
            pkey = (shape, job.node_selector, job.tolerations, job.gang_size)
            if pkey in self.placement_failed:
                self.stats["cache_hits"] += 1
                placement_failure = placement_failure or self.placement_failed[pkey]
                continue
            stmt = Statement(self.cluster)
            self.stats["placement_attempts"] += 1
            result = self.placer.place_gang(job, shape, stmt, needed, job.gang_size, explain=job.gang_size > 1)
            if result.explanation is None:
                stmt.commit()
                request = self._request(shape, len(result.placements))
                borrowed = self.quota.would_borrow(cq, request)
                return _Attempt(admission=Admission(job.id, model, result.placements, borrowed), request=request)
            failure = None
            if job.gang_size > 1 and result.fit_count:
                _, counts = result.explanation
                failure = gang_reason(result.fit_count, job.gang_size, self.cluster.n, counts)
            self.placement_failed[pkey] = failure
            placement_failure = placement_failure or failure
        if self.policy.preemption and self.preemptors.get(cq, 0) < self.policy.preemptors_per_queue:
            for shape, minimum in tried:
                pre_key = (cq, job.priority, shape, job.node_selector, job.tolerations, job.gang_size)
                if pre_key in self.preemption_failed:
                    continue
                victims = self._victims(job, cq, shape, minimum)
                if victims:
                    self.preemptors[cq] = self.preemptors.get(cq, 0) + 1
                    return _Attempt(victims=victims, request=minimum, cacheable=False)
                self.preemption_failed.add(pre_key)
        if deferrable:
            return _Attempt(deferred=True)
        if fitting_shapes and placement_failure is None:
            ekey = (tuple(fitting_shapes), job.node_selector, job.tolerations)
            placement_failure = self.explained.get(ekey)
            if placement_failure is None:
                fitting, counts = self.placer.explain(job, fitting_shapes)
                placement_failure = placement_reason(self.cluster.n, fitting, counts)
                self.explained[ekey] = placement_failure
        if placement_failure is not None:
            if invalid:
                placement_failure = replace(
                    placement_failure, message=f"{placement_failure.message} ({'; '.join(invalid)})"
                )
            return _Attempt(reason=placement_failure)
        if quota_reasons:
            if len(quota_reasons) == 1:
                return _Attempt(reason=quota_reasons[0])
            message = "; ".join(r.message.removeprefix("quota: ") for r in quota_reasons)
            return _Attempt(reason=Reason(ReasonKind.QUOTA, "quota: " + message, quota_reasons[0].details))
        return _Attempt(reason=Reason(ReasonKind.INVALID, "invalid: " + "; ".join(invalid)))

    def _request(self, shape: Shape, count: int) -> dict[str, int]:
        """``request_of`` memoised for the cycle (callers never mutate the result)."""
        key = (shape, count)
        request = self._requests.get(key)
        if request is None:
            request = self._requests[key] = request_of(shape, count)
        return request

    def _quota_count(self, cq: str, shape: Shape, gang: int, replicas: int, borrow: bool) -> int:
        """How many replicas (up to ``replicas``) the queue's quota allows now (within nominal unless
        ``borrow``)."""
        count = replicas
        for key, amount in self._request(shape, 1).items():
            room = self.quota.room(cq, key, borrow)
            if room is not None:
                count = min(count, room // amount)
        return count

    def _quota_reason(self, cq: str, request: dict[str, int]) -> Reason:
        for key, amount in request.items():
            available = self.quota.available(cq, key)
            if available is not None and amount > available:
                return quota_reason(
                    cq,
                    self.cohort_of.get(cq, ""),
                    key,
                    self.quota.used(cq, key),
                    self.quota.nominal(cq, key) or 0,
                    amount,
                    self.quota.borrowable(cq, key),
                )
        return Reason(ReasonKind.QUOTA, f"quota: queue {cq} has no room", (("cluster_queue", cq),))

    def _victim_index_now(self) -> VictimIndex:
        if self._victim_index is None:
            self._victim_index = VictimIndex(self._initial_holders, self.cohort_of)
        return self._victim_index

    def _victims(self, job: Workload, cq: str, shape: Shape, request: dict[str, int]) -> list[Victim] | None:
        def fits() -> bool:
            return self.placer.can_place(job, shape, job.gang_size)

        eligible = np.zeros(self.cluster.n, dtype=bool)
        eligible[self.placer.eligible(job, shape)] = True
        index = self.cluster.index

        def nodes_of(holder: Holder) -> np.ndarray:
            return np.array([index[p.node] for p in holder.placements if p.node in index], dtype=np.int64)

        def on_useful_node(holder: Holder) -> bool:
            nodes = nodes_of(holder)
            return bool(len(nodes)) and bool(eligible[nodes].any())

        def frees_a_node(holder: Holder) -> bool:
            nodes = nodes_of(holder)
            return bool(len(self.placer.feasible(shape, nodes[eligible[nodes]])))

        return select_victims(
            job=job,
            cq=cq,
            cohort=self.cohort_of.get(cq, ""),
            request=request,
            gpu_key=gpu_key(shape.gpu_model) if shape.gpu_model else None,
            index=self._victim_index_now(),
            taken=self.taken,
            quota=self.quota,
            cluster=self.cluster,
            fits=fits,
            on_useful_node=on_useful_node,
            frees_a_node=frees_a_node,
        )

    def _preempt(self, job: Workload, attempt: _Attempt) -> None:
        victims = attempt.victims or []
        names = []
        for victim in victims:
            w = victim.holder.workload
            self.taken.add(w.id)
            names.append(w.id)
            if victim.kind == "priority":
                why = f"priority: {job.id} (priority {job.priority}) outranks it (priority {w.priority})"
            else:
                why = (
                    f"reclaim: queue {self.lq_by_name[job.local_queue].cluster_queue} reclaims quota "
                    f"that queue {victim.holder.cq} borrowed"
                )
            self.preemptions.append(Preemption(w.id, job.id, why))
        message = f"preempting: waiting for {len(victims)} job(s) to stop: {', '.join(names)}"
        self.pending[job.id] = (
            Reason(ReasonKind.PREEMPTING, message, (("victims", len(victims)),)),
            self.now,
        )

    # -- the plan ---------------------------------------------------------------------------------

    def _plan(self) -> Plan:
        estimates = self._estimates()
        positions = self._positions()
        pending = []
        for w in self.snapshot.workloads:
            if w.state != WorkloadState.PENDING or w.id not in self.pending:
                continue
            reason, fixed = self.pending[w.id]
            estimate = fixed if fixed is not None else estimates.get(w.id)
            pending.append(PendingInfo(w.id, reason, positions.get(w.id, 0), estimate))
        pending.sort(key=lambda p: p.workload_id)
        admissions = sorted(self.admissions, key=lambda a: a.workload_id)
        stats = dict(self.stats)
        stats.update(
            {
                "nodes": self.cluster.n,
                "pending_considered": len(self.considered),
                "admitted": len(admissions),
                "preempted": len(self.preemptions),
                "still_pending": len(pending),
            }
        )
        return Plan(tuple(admissions), tuple(self.preemptions), tuple(pending), tuple(sorted(stats.items())))

    def _positions(self) -> dict[str, int]:
        by_lq: dict[str, list[Workload]] = {}
        for w in self.snapshot.workloads:
            if w.state == WorkloadState.PENDING and w.id in self.pending:
                by_lq.setdefault(w.local_queue, []).append(w)
        positions: dict[str, int] = {}
        for jobs in by_lq.values():
            for k, w in enumerate(sorted(jobs, key=lq_order_key), start=1):
                positions[w.id] = k
        return positions

    def _estimates(self) -> dict[str, float | None]:
        cluster = self.cluster
        schedulable = ~cluster.cordoned
        free: dict[str, int] = {
            CPU: int(cluster.cpu_free[schedulable].sum()),
            MEMORY: int(cluster.mem_free[schedulable].sum()),
        }
        ceiling: dict[str, int] = {
            CPU: int(cluster.cpu_total[schedulable].sum()),
            MEMORY: int(cluster.mem_total[schedulable].sum()),
        }
        # A model's MIG and plain nodes are separate pools: neither kind of request can use the other's.
        for model, code in cluster.model_code.items():
            rows = schedulable & (cluster.node_model == code)
            plain, mig = rows & ~cluster.mig_node, rows & cluster.mig_node
            key = gpu_key(model)
            free[key] = int(np.clip(cluster.dev_free[plain], 0, None).sum())
            ceiling[key] = int(cluster.gpu_count[plain].sum()) * FULL
            mig_key = _mig_pool(key)
            ceiling[mig_key] = int(cluster.gpu_count[mig].sum()) * FULL
            free[mig_key] = ceiling[mig_key] - int(
                sum(int(m).bit_count() for m in cluster.mig_mask[mig].ravel()) * FULL // 8
            )
        for cq, limits in self.quota.limits.items():
            for key, limit in limits.items():
                qkey = f"{cq}|{key}"
                available = self.quota.available(cq, key)
                free[qkey] = available if available is not None else 0
                cohort = self.cohort_of.get(cq, "")
                ceiling_q = limit.nominal
                if cohort:
                    pool = self.quota._pool_cap.get((cohort, key), 0)
                    others = pool - limit.lendable
                    extra = others if limit.borrowing_limit is None else min(others, limit.borrowing_limit)
                    ceiling_q = limit.nominal + max(0, extra)
                ceiling[qkey] = ceiling_q
        # Which job waits on what: only those resources need their release events.
        requests: dict[tuple[object, ...], list[dict[str, int]]] = {}
        waiting: list[tuple[Workload, list[dict[str, int]]]] = []
        out: dict[str, float | None] = {}
        for job in self.considered:
            if job.id not in self.pending or self.pending[job.id][1] is not None:
                continue
            if self.pending[job.id][0].kind in (ReasonKind.BUDGET, ReasonKind.INVALID):
                out[job.id] = None
                continue
            cq = self.lq_by_name[job.local_queue].cluster_queue
            signature = (
                cq,
                job.resources,
                job.gang_size,
                job.allowed_gpu_models,
                job.node_selector,
                job.tolerations,
            )
            options = requests.get(signature)
            if options is None:
                options = requests[signature] = self._estimate_options(job, cq)
            waiting.append((job, options))
        needed = {key for options in requests.values() for request in options for key in request}
        estimator = StartEstimator(self.now, free, ceiling)
        victims = self.taken
        events: dict[str, list[tuple[float, int]]] = {key: [] for key in needed}
        quota_keys: dict[str, dict[str, str]] = {}
        for cq, limits in self.quota.limits.items():
            quota_keys[cq] = {key: f"{cq}|{key}" for key in limits if f"{cq}|{key}" in needed}
        plain_nodes = {
            n.name for n, ok in zip(cluster.nodes, (schedulable & ~cluster.mig_node).tolist(), strict=True) if ok
        }
        mig_nodes = {
            n.name for n, ok in zip(cluster.nodes, (schedulable & cluster.mig_node).tolist(), strict=True) if ok
        }
        for holder in self.holders:
            w = holder.workload
            started = w.started_at if w.started_at is not None else self.now
            end = self.now if w.id in victims else max(self.now, started + w.runtime_s)
            qkeys = quota_keys.get(holder.cq, {})
            for key, amount in holder.request.items():
                quota_key = qkeys.get(key)
                if quota_key is not None:
                    events[quota_key].append((end, amount))
            released = holder.request
            if any(p.node not in plain_nodes for p in holder.placements):
                # Only capacity on schedulable nodes is in the pools (what a cordoned or vanished node
                # frees cannot start anything), and MIG nodes' GPUs are a pool of their own.
                released = self._placements_request(w, tuple(p for p in holder.placements if p.node in plain_nodes))
                on_mig = self._placements_request(w, tuple(p for p in holder.placements if p.node in mig_nodes))
                for key, amount in on_mig.items():
                    pooled = _mig_pool(key) if key.startswith("gpu/") else key
                    released[pooled] = released.get(pooled, 0) + amount
            for key, amount in released.items():
                if key in events:
                    events[key].append((end, amount))
        for key, items in events.items():
            estimator.preload_many(key, items)
        estimator.seal()
        for job, options in waiting:
            best: tuple[float, dict[str, int]] | None = None
            for request in options:
                start = _peek(estimator, request)
                if start is not None and (best is None or start < best[0]):
                    best = (start, request)
            if best is None:
                out[job.id] = None
                continue
            out[job.id] = estimator.start(best[1], job.runtime_s)
        return out

    def _estimate_options(self, job: Workload, cq: str) -> list[dict[str, int]]:
        """The pooled request of ``job`` on each GPU model it may use, in flavor order."""
        options = []
        for gpu_model in self._models(job, cq):
            shape = self.placer.shape_for(job, gpu_model)
            if isinstance(shape, str):
                continue
            eligible = self.placer.eligible(job, shape)
            counts = self.cluster.gpu_count[eligible]
            if shape.kind != "cpu" and (
                int(counts.sum()) * FULL < shape.quota_milli * job.gang_size or int(counts.max(initial=0)) < shape.gpus
            ):
                continue  # the nodes this job may use could never hold it on this model
            request = self._estimate_request(cq, request_of(shape, job.gang_size))
            if shape.kind != "cpu":  # GPUs bind a GPU job; pooled CPU/memory would only add walks
                request.pop(CPU, None)
                request.pop(MEMORY, None)
            if shape.kind == "mig" and shape.gpu_model is not None:
                key = gpu_key(shape.gpu_model)
                request[_mig_pool(key)] = request.pop(key)
            options.append(request)
        return options

    def _estimate_request(self, cq: str, request: dict[str, int]) -> dict[str, int]:
        out = dict(request)
        for key, amount in request.items():
            if key in self.quota.limits.get(cq, {}):
                out[f"{cq}|{key}"] = amount
        return out


def _mig_pool(key: str) -> str:
    """The estimator's pool of a GPU model's MIG nodes (``key`` is the model's ``gpu_key``)."""
    return f"{key}@mig"


def _peek(estimator: StartEstimator, request: dict[str, int]) -> float | None:
    start = estimator.now
    for resource, need in request.items():
        if need <= 0:
            continue
        ready = estimator._ready_at(resource, need)
        if ready is None:
            return None
        start = max(start, ready)
    return start


def _typical_shapes(snapshot: Snapshot) -> tuple[tuple[int, int, int, tuple[str, ...]], ...]:
    """Observed replica shapes (one entry per replica): the workload mix FGD measures against.

    A GPU-memory request counts as whole GPUs of the smallest device memory among its allowed models.
    MIG requests are left out (outside FGD's model).
    """
    memory = dict(snapshot.gpu_memory_gib)
    for node in snapshot.nodes:
        if node.gpu_model and node.gpu_memory_gib:
            memory.setdefault(node.gpu_model, node.gpu_memory_gib)
    out: list[tuple[int, int, int, tuple[str, ...]]] = []
    for w in snapshot.workloads:
        res = w.resources
        if res.gpu:
            entry = (res.cpu_milli, FULL, res.gpu, w.allowed_gpu_models)
        elif res.gpu_milli:
            entry = (res.cpu_milli, res.gpu_milli, 1, w.allowed_gpu_models)
        elif res.gpu_memory_gib:
            sizes = [memory.get(m, 0) or default_device_memory_gib(m) for m in w.allowed_gpu_models]
            size = min([s for s in sizes if s > 0] or [80])
            entry = (res.cpu_milli, FULL, devices_for_memory(res.gpu_memory_gib, size), w.allowed_gpu_models)
        elif res.mig_profile:
            continue
        else:
            entry = (res.cpu_milli, 0, 0, ())
        out.extend([entry] * w.replicas)
    return tuple(out)


__all__ = ["request_of", "run_cycle"]
