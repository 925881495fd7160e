"""The capacity signal: how many new nodes of which pool would let a job waiting for capacity start.

What a Cluster Autoscaler or Karpenter needs (Kueue calls it a ProvisioningRequest). For each job
still pending because of capacity (a ``placement`` or ``gang`` reason: capacity in use, scattered, or
a gang bigger than today's nodes; never quota, budget or an invalid request):

1. The node shapes on offer (``templates``): per pool, in the snapshot's order, then the nodes in no
   pool (pool ``""``), and per GPU model in it, the node with the most GPUs (then CPU, memory, name)
   stands for the nodes a scale-up would add there.
2. What-if clusters of ``k`` empty copies of one template (a copy keeps the template's labels and
   taints, with its own hostname) are handed to the engine's own placer (``Placer.can_place`` of the
   whole gang): the fit rule, GPU models, node selector, taints, affinity and one-domain rules are
   the cycle's, written once. First the replicas one copy holds (``per_node``, bisected), then
   ``ceil(gang / per_node)`` copies checked, adding copies while rules between replicas (anti-
   affinity, spread) still refuse, at most ``MAX_NODES``.
3. The job's request is the template needing the fewest nodes; ties go to the pool order, then
   the GPU model's order in the job's allowed models.

Each job is sized alone, on empty nodes: two jobs that could share a new node are counted apart,
and free room on today's nodes is not subtracted, so a pool's total is an upper bound.
``with_capacity_requests`` writes each request into the job's pending reason (details
``provision_pool``, ``provision_gpu_model``, ``provision_nodes``), where the portal reads it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .capacity import Cluster
from .model import GpuNode, Plan, Policy, Reason, ReasonKind, Snapshot, Workload, WorkloadState, labels_of
from .placement import Placer
from .pools import pool_index
from .taints import allowed_tolerations

MAX_NODES = 256  # a request beyond this says "more than 256": no scale-up of that size is likely
HOSTNAME = "kubernetes.io/hostname"
CAPACITY_KINDS = frozenset({ReasonKind.PLACEMENT, ReasonKind.GANG})


@dataclass(frozen=True, slots=True)
class Template:
    pool: str
    node: GpuNode


@dataclass(frozen=True, slots=True)
class NodeRequest:
    """``nodes`` more nodes like ``template`` (of ``pool``, GPU ``gpu_model``) would let the job start."""

    workload_id: str
    pool: str
    gpu_model: str | None
    template: str
    nodes: int


def templates(snapshot: Snapshot) -> tuple[Template, ...]:
    """Step 1: one node per (pool, GPU model), pools in the snapshot's order, then no pool."""
    best: dict[tuple[int, str], GpuNode] = {}
    for node in snapshot.nodes:
        index = pool_index(dict(node.labels), snapshot.pools)
        key = (index if index >= 0 else len(snapshot.pools), node.gpu_model or "")
        held = best.get(key)
        rank = (node.gpu_count, node.cpu_milli, node.memory_mib)
        if (
            held is None
            or rank > (held.gpu_count, held.cpu_milli, held.memory_mib)
            or (rank == (held.gpu_count, held.cpu_milli, held.memory_mib) and node.name < held.name)
        ):
            best[key] = node
    names = [p.name for p in snapshot.pools] + [""]
    return tuple(Template(names[index], best[(index, model)]) for index, model in sorted(best))


def waiting_for_capacity(plan: Plan) -> set[str]:
    """Jobs of the plan that wait for capacity: a placement or gang reason. Those no new node could
    help (a replica bigger than every node shape, a model or taint no pool offers) get no request
    from the trials."""
    return {p.workload_id for p in plan.pending if p.reason.kind in CAPACITY_KINDS}


class _WhatIf:
    """Placement trials of one job on copies of templates (step 2)."""

    def __init__(self, snapshot: Snapshot, policy: Policy) -> None:
        self.snapshot = snapshot
        self.policy = policy
        self.mig_profiles = dict(snapshot.mig_profiles)
        self._placers: dict[tuple[str, int], Placer] = {}

    def _placer(self, template: GpuNode, copies: int) -> Placer:
        key = (template.name, copies)
        placer = self._placers.get(key)
        if placer is None:
            nodes = tuple(
                replace(
                    template,
                    name=f"{template.name}+{i}",
                    labels=labels_of({**dict(template.labels), HOSTNAME: f"{template.name}+{i}"}),
                    unschedulable=False,
                )
                for i in range(1, copies + 1)
            )
            cluster = Cluster(replace(self.snapshot, nodes=nodes, workloads=(), foreign=()))
            placer = self._placers[key] = Placer(cluster, self.policy, self.mig_profiles)
        return placer

    def fits(self, job: Workload, template: GpuNode, copies: int, replicas: int) -> bool:
        placer = self._placer(template, copies)
        shape = placer.shape_for(job, template.gpu_model)
        if isinstance(shape, str):
            return False
        return placer.can_place(job, shape, replicas)

    def nodes_needed(self, job: Workload, template: GpuNode) -> int | None:
        """The fewest copies of ``template`` that hold the whole gang (None: none, or more than MAX_NODES)."""
        gang = job.gang_size
        if not self.fits(job, template, 1, 1):
            return None
        low, high = 1, min(gang, 64)  # replicas one node holds: fits(low), and bisect up to high
        if self.fits(job, template, 1, high):
            low = high
        else:
            while high - low > 1:
                middle = (low + high) // 2
                if self.fits(job, template, 1, middle):
                    low = middle
                else:
                    high = middle
        copies = math.ceil(gang / low)
        while copies <= MAX_NODES:
            if self.fits(job, template, copies, gang):
                return copies
            copies += max(1, copies // 4)
        return None


def capacity_requests(snapshot: Snapshot, plan: Plan, policy: Policy) -> tuple[NodeRequest, ...]:
    """Steps 1-3 for every job of ``plan`` waiting for capacity, by job id."""
    waiting = waiting_for_capacity(plan)
    if not waiting:
        return ()
    offered = templates(snapshot)
    pool_order = {t.pool: i for i, t in enumerate(offered)}
    grants = dict(snapshot.toleration_grants) if snapshot.toleration_grants is not None else None
    trials = _WhatIf(snapshot, policy)
    seen: dict[tuple[object, ...], tuple[str, str | None, str, int] | None] = {}
    requests = []
    for job in sorted((w for w in snapshot.workloads if w.id in waiting), key=lambda w: w.id):
        if job.state != WorkloadState.PENDING:
            continue
        if grants is not None:
            job = replace(job, tolerations=allowed_tolerations(job.tolerations, grants.get(job.team, ())))
        key = (job.resources, job.replicas, job.min_available, job.allowed_gpu_models, job.node_selector,
               job.tolerations, job.rules)  # fmt: skip
        if key not in seen:
            seen[key] = _best(job, offered, pool_order, trials)
        best = seen[key]
        if best is not None:
            pool, model, template, nodes = best
            requests.append(NodeRequest(job.id, pool, model, template, nodes))
    return tuple(requests)


def _best(
    job: Workload, offered: tuple[Template, ...], pool_order: dict[str, int], trials: _WhatIf
) -> tuple[str, str | None, str, int] | None:
    """Step 3: the template needing the fewest nodes (ties: pool order, then allowed-model order)."""
    wants_gpu = job.resources.wants_gpu
    allowed = job.allowed_gpu_models
    choices = []
    for template in offered:
        model = template.node.gpu_model
        if wants_gpu and (model is None or (allowed and model not in allowed)):
            continue
        nodes = trials.nodes_needed(job, template.node)
        if nodes is not None:
            model_rank = allowed.index(model) if allowed and model in allowed else 0
            choices.append((nodes, pool_order[template.pool], model_rank, template))
    if not choices:
        return None
    nodes, _, _, template = min(choices, key=lambda c: (c[0], c[1], c[2], c[3].node.name))
    return template.pool, template.node.gpu_model, template.node.name, nodes


def with_capacity_requests(plan: Plan, requests: tuple[NodeRequest, ...]) -> Plan:
    """The plan with each request in its job's pending reason (details and a sentence)."""
    by_job = {r.workload_id: r for r in requests}
    if not by_job:
        return plan
    pending = []
    for info in plan.pending:
        request = by_job.get(info.workload_id)
        if request is not None:
            info = replace(info, reason=_with_request(info.reason, request))
        pending.append(info)
    return replace(plan, pending=tuple(pending))


def _with_request(reason: Reason, request: NodeRequest) -> Reason:
    where = f"pool {request.pool}" if request.pool else "no pool"
    model = request.gpu_model or "CPU"
    plural = "s" if request.nodes != 1 else ""
    sentence = f"; {request.nodes} more {model} node{plural} of {where} (like {request.template}) would let it start"
    details = (
        *reason.details,
        ("provision_pool", request.pool),
        ("provision_gpu_model", request.gpu_model or ""),
        ("provision_nodes", request.nodes),
    )
    return replace(reason, message=reason.message + sentence, details=details)
