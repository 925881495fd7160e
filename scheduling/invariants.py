"""The portal's invariants, checked on any database and cluster (``manage.py audit``).

Steps:
1. Placements: only admitted or running jobs hold them, each holds between its gang size and its
   replica count, every one is on a node the cluster has.
2. Capacity, per node: CPU and memory of placements plus foreign pods within allocatable; per
   device: a whole GPU alone on it, fractional shares at most 1000 milli (the node pool's overcommit,
   ``engine.pools``, when it has one), MIG slices not overlapping and within 7 compute slices, no
   device split both ways, no index beyond the node's devices.
3. Quota, per ClusterQueue and resource, charged as the engine charges: without a cohort within the
   nominal quota; in a cohort within nominal plus borrowing limit, and the cohort's lendable pool not
   overdrawn.
4. History: every job's transitions chain from Pending, each legal, ending in its current state;
   admissions equal the attempt counter; at most one start per attempt; nothing after a final state.
5. Cluster (when the backend lists pods): no portal pod without a job, none running without an
   active job attempt, no running job without its pods, no admitted job left without pods, no
   replica running in two attempts.
"""

from __future__ import annotations

import contextlib
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.utils import timezone

from portal.jobs.models import Job, JobTransition, ReplicaPlacement
from portal.jobs.states import ACTIVE_STATES, FINAL_STATES, TRANSITIONS, JobState
from scheduling.adapters import orm
from scheduling.adapters.contract import ClusterBackend
from scheduling.engine.mig import COMPUTE_SLICES, default_device_memory_gib, mig_geometry
from scheduling.engine.model import GpuNode, Snapshot
from scheduling.engine.pools import pool_index, share_capacity_milli
from scheduling.engine.quota import CPU, MEMORY, QuotaBook, gpu_key

FULL = 1000


@dataclass(frozen=True, slots=True)
class Finding:
    check: str  # placement | capacity | quota | history | cluster
    message: str

    def __str__(self) -> str:
        return f"[{self.check}] {self.message}"


def _device_memory(node: GpuNode, model_memory: dict[str, int]) -> int:
    model = node.gpu_model or ""
    return node.gpu_memory_gib or model_memory.get(model, 0) or default_device_memory_gib(model)


def placement_findings(nodes: dict[str, GpuNode] | None) -> list[Finding]:
    out: list[Finding] = []
    jobs = {
        row[0]: row
        for row in Job.objects.filter(state__in=ACTIVE_STATES).values_list("id", "state", "replicas", "min_available")
    }
    counts: Counter[int] = Counter()
    for job_id, state, node in ReplicaPlacement.objects.values_list("job_id", "job__state", "node"):
        counts[job_id] += 1
        if state not in ACTIVE_STATES:
            out.append(Finding("placement", f"job {job_id} is {state} but still holds a placement on {node}"))
        elif nodes is not None and node not in nodes:
            out.append(Finding("placement", f"job {job_id} is placed on {node}, which the cluster does not have"))
    for job_id, (_, state, replicas, min_available) in jobs.items():
        gang = min_available or replicas
        if not gang <= counts[job_id] <= replicas:
            out.append(
                Finding(
                    "placement", f"{state} job {job_id} holds {counts[job_id]} placements (gang {gang}, {replicas})"
                )
            )
    return out


@dataclass
class _Tally:
    """What the placements and foreign pods of a snapshot hold, per node and per device."""

    cpu: Counter[str] = field(default_factory=Counter)
    memory: Counter[str] = field(default_factory=Counter)
    shares: dict[tuple[str, int], int] = field(default_factory=lambda: defaultdict(int))
    whole: Counter[tuple[str, int]] = field(default_factory=Counter)  # holders of the whole device
    mig_masks: dict[tuple[str, int], list[tuple[int, str]]] = field(default_factory=lambda: defaultdict(list))
    compute: Counter[tuple[str, int]] = field(default_factory=Counter)
    compute_slices: dict[tuple[str, int], int] = field(default_factory=dict)  # the device's, per its MIG table
    holders: dict[tuple[str, int], set[str]] = field(default_factory=lambda: defaultdict(set))


def capacity_findings(snapshot: Snapshot) -> list[Finding]:
    """Nothing over-committed: CPU and memory per node, share per device, MIG slices per device."""
    nodes = {n.name: n for n in snapshot.nodes}
    tally = _Tally()
    out = _tally(snapshot, nodes, tally)
    for name, node in nodes.items():
        if tally.cpu[name] > node.cpu_milli:
            out.append(Finding("capacity", f"{name}: CPU over-committed, {tally.cpu[name]}m of {node.cpu_milli}m"))
        if tally.memory[name] > node.memory_mib:
            out.append(
                Finding("capacity", f"{name}: memory over-committed, {tally.memory[name]} MiB of {node.memory_mib}")
            )
    for device, milli in sorted(tally.shares.items()):
        holder = nodes.get(device[0])
        pool = pool_index(dict(holder.labels), snapshot.pools) if holder is not None and not holder.mig_enabled else -1
        cap = share_capacity_milli(snapshot.pools[pool].overcommit_ratio) if pool >= 0 else FULL
        whole = tally.whole[device]
        if milli > cap or (whole and (whole > 1 or milli > FULL)):
            who = ", ".join(sorted(tally.holders[device]))
            out.append(Finding("capacity", f"{device[0]} GPU {device[1]} over-committed: {milli}/{cap} milli ({who})"))
        if milli and tally.mig_masks.get(device):
            out.append(Finding("capacity", f"{device[0]} GPU {device[1]} is used both whole/shared and as MIG slices"))
    for device, masks in sorted(tally.mig_masks.items()):
        seen = 0
        for mask, owner in masks:
            if seen & mask:
                out.append(
                    Finding("capacity", f"{device[0]} GPU {device[1]}: MIG slice of job {owner} overlaps another")
                )
            seen |= mask
        limit = tally.compute_slices.get(device, COMPUTE_SLICES)
        if tally.compute[device] > limit:
            out.append(
                Finding(
                    "capacity", f"{device[0]} GPU {device[1]}: {tally.compute[device]} MIG compute slices of {limit}"
                )
            )
    return out


def _tally(snapshot: Snapshot, nodes: dict[str, GpuNode], tally: _Tally) -> list[Finding]:
    """Add up every placement and foreign pod into ``tally``; returns placements that cannot exist."""
    out: list[Finding] = []
    model_memory = dict(snapshot.gpu_memory_gib)
    for usage in snapshot.foreign:
        tally.cpu[usage.node] += usage.cpu_milli
        tally.memory[usage.node] += usage.memory_mib
        for index in usage.gpu_indices:
            tally.shares[(usage.node, index)] += usage.gpu_milli
            tally.whole[(usage.node, index)] += usage.gpu_milli >= FULL
            tally.holders[(usage.node, index)].add("a foreign pod")
    for workload in snapshot.workloads:
        for p in workload.placements:
            node = nodes.get(p.node)
            tally.cpu[p.node] += p.cpu_milli
            tally.memory[p.node] += p.memory_mib
            for index in p.gpu_indices:
                device = (p.node, index)
                tally.holders[device].add(f"job {workload.id}")
                if node is not None and index >= node.gpu_count:
                    out.append(
                        Finding(
                            "capacity", f"job {workload.id} uses device {index} of {p.node}, which has {node.gpu_count}"
                        )
                    )
                if not p.mig_profile:
                    tally.shares[device] += p.gpu_milli
                    tally.whole[device] += p.gpu_milli >= FULL
                    continue
                geometry = mig_geometry(p.mig_profile, _device_memory(node, model_memory)) if node else None
                if geometry is None:
                    out.append(Finding("capacity", f"job {workload.id}: MIG {p.mig_profile} cannot exist on {p.node}"))
                    continue
                tally.mig_masks[device].append((geometry.mask_at(p.mig_slot or 0), workload.id))
                tally.compute[device] += geometry.compute
                tally.compute_slices[device] = geometry.device_compute
    return out


def quota_findings(snapshot) -> list[Finding]:
    book = QuotaBook(snapshot.cluster_queues)
    cq_of = {lq.name: lq.cluster_queue for lq in snapshot.local_queues}
    nodes = {n.name: n for n in snapshot.nodes}
    model_memory = dict(snapshot.gpu_memory_gib)
    for workload in snapshot.workloads:
        request: Counter[str] = Counter()
        for p in workload.placements:
            request[CPU] += p.cpu_milli
            request[MEMORY] += p.memory_mib
            model = workload.gpu_model or (nodes[p.node].gpu_model if p.node in nodes else None)
            if not p.gpu_indices or not model:
                continue
            if p.mig_profile:
                node = nodes.get(p.node)
                memory_gib = _device_memory(node, model_memory) if node else default_device_memory_gib(model)
                geometry = mig_geometry(p.mig_profile, memory_gib)
                request[gpu_key(model)] += geometry.gpu_milli if geometry else 0
            else:
                request[gpu_key(model)] += p.gpu_milli * len(p.gpu_indices)
        book.add(cq_of.get(workload.local_queue, ""), dict(request))
    out: list[Finding] = []
    for cq in snapshot.cluster_queues:
        for key, limit in sorted(book.limits.get(cq.name, {}).items()):
            used = book.used(cq.name, key)
            if not cq.cohort and used > limit.nominal:
                out.append(Finding("quota", f"{cq.name} uses {used} of {key}, nominal {limit.nominal}"))
            if cq.cohort:
                if limit.borrowing_limit is not None and used > limit.nominal + limit.borrowing_limit:
                    out.append(
                        Finding(
                            "quota",
                            f"{cq.name} uses {used} of {key}, over nominal {limit.nominal} + borrowing "
                            f"{limit.borrowing_limit}",
                        )
                    )
                if book.pool_free(cq.name, key) < 0:
                    out.append(Finding("quota", f"cohort {cq.cohort} lent more {key} than it has ({cq.name})"))
        unlisted = set(book.usage.get(cq.name, {})) - set(book.limits.get(cq.name, {})) - {CPU, MEMORY}
        out.extend(
            Finding("quota", f"{cq.name} uses {key} without any quota for it")
            for key in sorted(unlisted)
            if book.used(cq.name, key)
        )
    return out


def history_findings() -> list[Finding]:
    out: list[Finding] = []
    jobs = dict(Job.objects.values_list("id", "state"))
    attempts = dict(Job.objects.values_list("id", "attempt"))
    chains: dict[int, list[tuple[str, str]]] = defaultdict(list)
    # Insertion order is the order things happened: cluster timestamps may precede portal ones.
    for job_id, source, target in JobTransition.objects.order_by("job_id", "id").values_list(
        "job_id", "from_state", "to_state"
    ):
        chains[job_id].append((source, target))
    for job_id, state in jobs.items():
        chain = chains.get(job_id, [])
        if not chain:
            out.append(Finding("history", f"job {job_id} has no history"))
            continue
        if chain[0] != ("", JobState.PENDING):
            out.append(Finding("history", f"job {job_id} does not start as Pending: {chain[0]}"))
        previous = chain[0][1]
        starts_this_attempt = 0
        admissions = 0
        for source, target in chain[1:]:
            if source != previous:
                out.append(Finding("history", f"job {job_id}: {source} → {target} follows {previous}"))
            elif target not in TRANSITIONS.get(source, frozenset()):
                out.append(Finding("history", f"job {job_id}: illegal {source} → {target}"))
            if target == JobState.ADMITTED:
                admissions += 1
                starts_this_attempt = 0
            if target == JobState.RUNNING:
                starts_this_attempt += 1
                if starts_this_attempt > 1:
                    out.append(Finding("history", f"job {job_id} started twice in attempt {admissions}"))
            previous = target
        if previous != state:
            out.append(Finding("history", f"job {job_id} is {state} but its history ends in {previous}"))
        finals = [t for _, t in chain if t in FINAL_STATES]
        if len(finals) > 1:
            out.append(Finding("history", f"job {job_id} finished {len(finals)} times"))
        if admissions != attempts[job_id]:
            out.append(Finding("history", f"job {job_id}: {admissions} admissions but attempt {attempts[job_id]}"))
    return out


def cluster_findings(backend: ClusterBackend, *, now: datetime, admitted_grace_s: float) -> list[Finding]:
    from scheduling.adapters.k8s import pods as ko

    raw_pods = getattr(backend, "raw_pods", None)
    if raw_pods is None:
        return []
    backend.sync()  # type: ignore[attr-defined]
    keyed = [(pod, key) for pod in raw_pods() if (key := ko.pod_job_attempt(pod)) is not None]
    with consistent_snapshot():
        active, known, placements = _cluster_rows({key[0] for _, key in keyed})
    return _pod_findings(keyed, active, known, placements, now=now, admitted_grace_s=admitted_grace_s)


def _cluster_rows(job_ids: set[int]):
    """What the pod checks compare against: active attempts, which jobs exist, placements per job."""
    active = {
        (job_id, attempt): (state, admitted_at)
        for job_id, attempt, state, admitted_at in Job.objects.filter(state__in=ACTIVE_STATES).values_list(
            "id", "attempt", "state", "admitted_at"
        )
    }
    known = set(Job.objects.filter(pk__in=job_ids).values_list("id", flat=True))
    placements = Counter(ReplicaPlacement.objects.filter(job__state__in=ACTIVE_STATES).values_list("job_id", flat=True))
    return active, known, placements


def _pod_findings(keyed, active, known, placements, *, now: datetime, admitted_grace_s: float) -> list[Finding]:
    from scheduling.adapters.k8s import pods as ko

    out: list[Finding] = []
    by_attempt: Counter[tuple[int, int]] = Counter()
    live_replicas: dict[tuple[int, str], list[str]] = defaultdict(list)
    for pod, key in keyed:
        name = f"{pod['metadata'].get('namespace')}/{pod['metadata']['name']}"
        terminating = bool(pod["metadata"].get("deletionTimestamp"))
        if key[0] not in known:
            out.append(Finding("cluster", f"pod {name} belongs to no job (job {key[0]} does not exist)"))
        elif key not in active and not terminating and ko.pod_holds_capacity(pod):
            out.append(Finding("cluster", f"pod {name} runs without an active job attempt (job {key[0]})"))
        by_attempt[key] += 1
        if ko.pod_holds_capacity(pod) and not terminating:
            replica = pod["metadata"]["labels"].get(ko.LABEL_REPLICA, "")
            live_replicas[(key[0], replica)].append(name)
    for (job_id, replica), names in live_replicas.items():
        if len(names) > 1:
            out.append(Finding("cluster", f"job {job_id} replica {replica} runs twice: {', '.join(sorted(names))}"))
    for (job_id, attempt), (state, admitted_at) in active.items():
        have, want = by_attempt[(job_id, attempt)], placements[job_id]
        if have >= want:
            continue
        young = admitted_at is not None and now - admitted_at < timedelta(seconds=admitted_grace_s)
        if state == JobState.RUNNING or not young:
            out.append(Finding("cluster", f"{state} job {job_id} has {have} of its {want} pods"))
    return out


class _NoCluster:
    """For a database-only audit: no nodes, nothing foreign (quota and history still checked)."""

    name = "none"

    def nodes(self) -> list[GpuNode]:
        return []

    def foreign_usage(self) -> list:
        return []


@contextlib.contextmanager
def consistent_snapshot() -> Iterator[None]:
    """One read-only transaction that sees a single snapshot of the database for all its queries.

    The checks read jobs, placements and transitions in several queries; under the default READ
    COMMITTED isolation a cycle committing between two of them made the audit report states that
    never existed (a job Pending with an Admitted history, quota counted twice). REPEATABLE READ
    fixes the snapshot at the first query; READ ONLY makes it cheap and safe beside live cycles.
    """
    outermost = not connection.in_atomic_block  # inside a caller's transaction, its snapshot rules
    with transaction.atomic():
        if outermost and connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        yield


def audit_findings(
    *, backend: ClusterBackend | None, now: datetime | None = None, admitted_grace_s: float = 60.0
) -> list[Finding]:
    """Every broken invariant; an empty list means the database (and cluster, given a backend) is sound.

    The database checks read one consistent snapshot (``consistent_snapshot``). The pod checks list
    the cluster's pods first and then read the jobs in a second snapshot, newer than the pods."""
    now = now or timezone.now()
    findings: list[Finding] = []
    with consistent_snapshot():
        snapshot = orm.snapshot_load(backend=backend or _NoCluster())
        findings += placement_findings({n.name: n for n in snapshot.nodes} if backend is not None else None)
        if backend is not None:
            findings += capacity_findings(snapshot)
        findings += quota_findings(snapshot)
        findings += history_findings()
    if backend is not None:
        findings += cluster_findings(backend, now=now, admitted_grace_s=admitted_grace_s)
    return findings
