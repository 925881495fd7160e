"""Whether a workload can ever run on the cluster as configured: the "never fits" test, written once.

The cycle (step 2), the submit service (a never-fitting job is refused with a 400 naming the limit)
and a dry run all ask :func:`never_fits`. A job *never fits as configured* when no amount of waiting
lets it start: on the cluster as configured (every node empty, cordons lifted, pods of other
schedulers gone, every queue of the cohort idle) it still does not fit. Everything else that keeps
a job pending is something waiting can help with (quota or capacity in use, fragmentation, a budget
hold, victims still stopping) and is explained by the cycle with ``Reason.waits`` true.

The test, for a workload ``w`` in ClusterQueue ``q`` (``n`` = its gang minimum, ``min_available`` or
every replica), in this order; the first that holds is the reason (``details["limit"]``):

0. ``invalid``: its request cannot exist (unknown queue, several kinds of GPU request, a fraction
   outside 1..999, ``min_available > replicas``, negative amounts).
1. ``no_quota``: ``q`` lists none of the GPU models ``w`` allows.

Then, for every GPU model ``m`` ``w`` may use in ``q`` (CPU-only work: the CPU nodes and GPU nodes
alike), it never fits on ``m`` when:

2. ``catalogue``: the request cannot exist on ``m`` (a MIG profile ``m`` does not offer, the GPU memory
   of a model whose device memory is unknown);
3. ``absent_model``: no node has GPU model ``m``;
4. ``node_filters``: every node of ``m`` is refused by a static filter other than the cordon (MIG
   mode, MIG profile, node selector, taints): these only change when the cluster is reconfigured;
5. ``largest_node``: one replica needs more GPUs, CPU or memory than any remaining node has in all
   (named: the first resource no node has enough of, else "all of them on one node");
6. ``queue_ceiling``: ``n`` replicas charge more of some resource than ``q`` may ever hold, its
   nominal quota plus what it may borrow from its cohort (``QuotaBook.ceiling``);
7. ``cluster_total``: the remaining nodes, empty, hold fewer than ``n`` replicas
   (``fit.empty_capacity``: exact, as each replica takes one unit of a node's capacity);
8. ``one_domain``: a gang that must be in one rack (zone, NVLink domain, …: ``PlacementRules
   .required_topology``) finds no domain whose remaining nodes, empty, hold ``n`` replicas;
9. ``anti_affinity``: a required pod anti-affinity lets at most one replica into each domain of its
   topology key (nodes without the key hold as many as they can), and that is fewer than ``n``
   (within the one domain, when there is one). Both are upper bounds on what any placement reaches,
   so a job they call never-fitting truly never fits; spread constraints are left to the cycle.

``w`` never fits when it never fits on every model; the reason lists each model's limit. A job that
never fits gets no estimated start. Two Hypothesis properties keep this equal to the engine's own
admission on an empty cluster (``tests/scheduling/engine/test_verdict.py``): a job called
never-fitting is admitted on no empty cluster of that configuration, and a job admitted there is
never called never-fitting.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, replace
from operator import attrgetter

import numpy as np

from . import explain
from .capacity import FULL, Cluster
from .filters import FIT, REASONS, StaticFilters, rule_words, topology_levels
from .fit import Shape, empty_capacity, shape_of
from .model import LocalQueue, Policy, Reason, Snapshot, Workload
from .quota import CPU, MEMORY, QuotaBook, gpu_key, models_to_try, request_of

ShapeOf = Callable[[Workload, str | None], Shape | str]


def never_fits(snapshot: Snapshot, workload: Workload, levels: dict[str, str] | None = None) -> Reason | None:
    """Why ``workload`` can never run on ``snapshot``'s cluster as configured, or ``None`` when it fits
    there once enough of what runs has finished.

    Reads only the snapshot's configuration: nodes, queues and their quotas, GPU models' memory and
    MIG profiles (``snapshot.workloads`` and ``snapshot.foreign`` are ignored, so a snapshot without
    them is enough). The reason has ``waits`` false and names the limit with its numbers. ``levels``:
    the node label of each one-domain level (``filters.topology_levels``; the defaults without it).
    """
    return Feasibility.of(snapshot, levels).never_fits(workload)


class Feasibility:
    """The "never fits" test over one cluster configuration, with a cache per job signature.

    The cycle builds one over its own ``Cluster``, filters and quota book (it reads only their
    configured totals and limits, never what is free).
    """

    def __init__(
        self,
        cluster: Cluster,
        filters: StaticFilters,
        quota: QuotaBook,
        local_queues: dict[str, LocalQueue],
        shape: ShapeOf,
    ) -> None:
        self.cluster = cluster
        self.filters = filters
        self.quota = quota
        self.local_queues = local_queues
        self.shape = shape
        self._cache: dict[tuple[object, ...], Reason | None] = {}
        self._nodes_cache: dict[tuple[object, ...], tuple[Reason | None, Reason | None]] = {}

    @classmethod
    def of(cls, snapshot: Snapshot, levels: dict[str, str] | None = None) -> Feasibility:
        cluster = Cluster(snapshot)
        mig_profiles = dict(snapshot.mig_profiles)
        return cls(
            cluster,
            StaticFilters(cluster, levels if levels is not None else topology_levels(Policy())),
            QuotaBook(snapshot.cluster_queues),
            {lq.name: lq for lq in snapshot.local_queues},
            lambda w, model: shape_of(cluster, mig_profiles, w.resources, model),
        )

    def never_fits(self, workload: Workload) -> Reason | None:
        """See :func:`never_fits`. Jobs of one ClusterQueue that differ only in identity, priority and
        timing share the answer (a cycle asks for thousands of them)."""
        lq = self.local_queues.get(workload.local_queue)
        where = lq.cluster_queue if lq is not None and lq.cluster_queue in self.quota.queues else workload.local_queue
        key = (where, _same_answer(workload))
        try:  # one lookup when known (the usual case): the key hashes some thirty fields
            return self._cache[key]
        except KeyError:
            found = self._cache[key] = self._check(workload)
            return found

    def _check(self, w: Workload) -> Reason | None:
        # 0. Invalid.
        problem = invalid_problem(w, self.local_queues, self.quota)
        if problem is not None:
            return explain.invalid_reason(problem)
        cq = self.local_queues[w.local_queue].cluster_queue
        # 1. No quota for any model it allows.
        models = models_to_try(w, self.quota.flavors[cq])
        if not models:
            return explain.no_quota_reason(cq, ", ".join(w.allowed_gpu_models) or "any GPU")
        # 2.-7. Per model.
        reasons: list[tuple[str, Reason]] = []
        for model in models:
            reason = self._on_model(w, cq, model)
            if reason is None:
                return None
            reasons.append((model or "CPU", reason))
        return explain.per_model_reason(reasons)

    def _on_model(self, w: Workload, cq: str, model: str | None) -> Reason | None:
        shape = self.shape(w, model)
        if isinstance(shape, str):
            return explain.catalogue_reason(shape)
        key = (model, _same_answer(w))
        found = self._nodes_cache.get(key)
        if found is None:
            found = self._nodes_cache[key] = self._on_nodes(w, shape, model)
        per_replica, gang = found
        if per_replica is not None:
            return per_replica
        for resource, amount in request_of(shape, w.gang_size).items():
            ceiling = self.quota.ceiling(cq, resource)
            if ceiling is not None and amount > ceiling:
                cohort = self.quota.queues[cq].cohort
                nominal = self.quota.nominal(cq, resource) or 0
                return explain.ceiling_reason(cq, cohort, resource, amount, nominal, ceiling)
        return gang

    def _on_nodes(self, w: Workload, shape: Shape, model: str | None) -> tuple[Reason | None, Reason | None]:
        """Steps 3-5 (one replica) and 7 (the gang) on the nodes of ``model``: they do not depend on
        the queue, so jobs of every queue share them."""
        cluster = self.cluster
        if model is None:
            nodes = np.arange(cluster.n)
        elif model in cluster.model_slice:
            nodes = np.arange(*cluster.model_slice[model])
        else:
            return explain.absent_model_reason(model, cluster.models), None
        codes = self.filters.codes(w, shape, nodes, cordon=False)
        passing = nodes[codes == FIT]
        if len(passing) == 0:
            counts = np.bincount(codes, minlength=len(REASONS))
            words = {**dict(enumerate(REASONS)), **rule_words(w, self.filters.levels)}
            pairs = tuple((words[c], int(counts[c])) for c in np.argsort(-counts, kind="stable") if counts[c])
            return explain.filtered_reason(model, len(nodes), pairs), None
        capacity = empty_capacity(cluster, shape, passing)
        if not capacity.any():
            return self._largest_node(shape, passing, model), None
        total = int(np.minimum(capacity, w.gang_size).sum())
        if total < w.gang_size:
            return None, explain.cluster_total_reason(model, w.gang_size, total, int((capacity > 0).sum()))
        return None, self._rules_bound(w, model, passing, capacity)

    def _rules_bound(self, w: Workload, model: str | None, nodes: np.ndarray, capacity: np.ndarray) -> Reason | None:
        """Steps 8 and 9: the most replicas a one-domain gang and its required anti-affinity allow on
        the empty ``nodes`` (each holding ``capacity``), if fewer than the gang."""
        rules = w.rules
        if rules is None:
            return None
        anti = [t.topology_key for t in rules.anti_affinity if not t.weight]
        if not rules.required_topology and not anti:
            return None
        index, need = self.filters.index, w.gang_size
        if rules.required_topology:
            key = self.filters.topology_key(rules.required_topology)
            domains = index.domains(key)[0][nodes]  # every node has the label (a static filter)
        else:
            domains = np.zeros(len(nodes), dtype=np.int32)
        most = 0
        for domain in np.unique(domains).tolist():
            inside = domains == domain
            held = int(np.minimum(capacity[inside], need).sum())
            for anti_key in anti:
                codes = index.domains(anti_key)[0][nodes[inside]]
                labelled = codes >= 0
                one_each = len(np.unique(codes[labelled & (capacity[inside] > 0)]))
                held = min(held, one_each + int(np.minimum(capacity[inside][~labelled], need).sum()))
            most = max(most, held)
        if most >= need:
            return None
        if rules.required_topology:
            where = f"one {rules.required_topology}" + (f" ({key})" if key != rules.required_topology else "")
            return explain.one_domain_reason(model, need, most, where, anti)
        return explain.anti_affinity_reason(model, need, most, anti)

    def _largest_node(self, shape: Shape, nodes: np.ndarray, model: str | None) -> Reason:
        """Step 5's reason: the first resource no single node has enough of, else all of them together."""
        cluster = self.cluster
        gpus_alone = empty_capacity(cluster, replace(shape, cpu_milli=0, memory_mib=0), nodes)
        if shape.mig is not None and not gpus_alone.any():
            return explain.mig_slots_reason(model, shape.mig.profile)
        needs: list[tuple[str, int, int]] = []
        if shape.gpus and shape.gpu_model is not None:
            needs.append((gpu_key(shape.gpu_model), shape.gpus * FULL, int(cluster.gpu_count[nodes].max()) * FULL))
        if shape.cpu_milli:
            needs.append((CPU, shape.cpu_milli, int(cluster.cpu_total[nodes].max())))
        if shape.memory_mib:
            needs.append((MEMORY, shape.memory_mib, int(cluster.mem_total[nodes].max())))
        short = [need for need in needs if need[1] > need[2]]
        if short:
            return explain.largest_node_reason(model, short, together=False)
        return explain.largest_node_reason(model, needs, together=True)


def invalid_problem(w: Workload, local_queues: dict[str, LocalQueue], quota: QuotaBook) -> str | None:
    """Why ``w``'s request cannot exist whatever the cluster (step 0), or ``None``."""
    lq = local_queues.get(w.local_queue)
    if lq is None:
        return f"local queue {w.local_queue} does not exist"
    if lq.cluster_queue not in quota.queues:
        return f"cluster queue {lq.cluster_queue} of {lq.name} does not exist"
    res = w.resources
    kinds = sum(bool(x) for x in (res.gpu, res.gpu_milli, res.mig_profile, res.gpu_memory_gib))
    if kinds > 1:
        return "ask for whole GPUs, a GPU fraction, a MIG profile or GPU memory, not several"
    if res.gpu_milli and not 0 < res.gpu_milli < FULL:
        return f"gpu_milli must be between 1 and 999, got {res.gpu_milli}"
    if min(res.gpu, res.gpu_milli, res.gpu_memory_gib, res.cpu_milli, res.memory_mib) < 0:
        return "negative resource request"
    if w.replicas < 1 or not 0 <= w.min_available <= w.replicas:
        return f"replicas={w.replicas}, min_available={w.min_available}"
    return None


# Fields of a workload that cannot change whether it fits as configured (identity, team, priority,
# timing, run state, preferences, and its queue, which is keyed apart). Any field added to ``Workload``
# takes part in the answer unless it is listed here.
_NOT_IN_ANSWER = frozenset(
    {
        "id",
        "local_queue",
        "team",
        "priority",
        "created_at",
        "preemptible",
        "preferred_labels",
        "runtime_s",
        "state",
        "gpu_model",
        "placements",
        "started_at",
    }
)
_same_answer = attrgetter(*(f.name for f in fields(Workload) if f.name not in _NOT_IN_ANSWER))
