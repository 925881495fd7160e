"""Read-side questions about the cluster, for other apps (billing, pages, the submit service) that must
not drive a backend.

``cluster_nodes``, ``gpu_capacity``, ``cluster_configuration``, ``job_never_fits`` and the node
pools go through the configured backend (the simulated cluster's rows, or the Kubernetes watch
cache); callers pass ``backend`` when they already hold one.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from django.conf import settings

from portal.jobs.models import GpuModel, Job, JobAttempt, LocalQueue
from portal.jobs.states import JobState
from portal.prepared import Prepared
from portal.tenants.models import Team
from portal.tenants.selectors import team_holds, team_list_for_user
from scheduling.adapters import orm
from scheduling.adapters.changes import rows_version
from scheduling.adapters.contract import ClusterBackend, node_capacity_type
from scheduling.adapters.factory import cluster_backend
from scheduling.adapters.job_rows import cycle_jobs
from scheduling.adapters.k8s.namespaces import NamespaceObjects, cpu_quantity, memory_quantity
from scheduling.adapters.k8s.resources import GPU_RESOURCE, MIG_RESOURCE_PREFIX
from scheduling.adapters.k8s.training import procs_per_node, rendezvous_env
from scheduling.adapters.orm import queues_load
from scheduling.adapters.workloads import workload_from_job, workload_from_request
from scheduling.engine import podsets
from scheduling.engine.filters import topology_levels
from scheduling.engine.mig import mig_geometry
from scheduling.engine.model import GpuNode, Policy, Reason, Snapshot, Workload
from scheduling.engine.pools import pool_index, share_capacity_milli
from scheduling.engine.quota import CPU, MEMORY, QuotaBook, gpu_key
from scheduling.engine.runtimes import Runs, runtime_model
from scheduling.engine.verdict import Feasibility
from scheduling.models import NamespaceObject
from scheduling.sim.history import ReplayTiming

logger = logging.getLogger(__name__)


def policy_from_settings() -> Policy:
    """The cycle's policy, from the settings (placement, seed, topology labels)."""
    return Policy(
        forecast_decisions=settings.FORECAST_DECISIONS,
        reserved_jobs=settings.RESERVED_JOBS,
        placement=settings.PLACEMENT_POLICY,
        seed=settings.SCHEDULER_SEED,
        rack_label=settings.K8S_RACK_LABEL,
        zone_label=settings.K8S_ZONE_LABEL,
        nvlink_label=settings.K8S_NVLINK_LABEL,
        inference_preempts_training=settings.INFERENCE_PREEMPTS_TRAINING,
    )


def replay_timing_from_settings() -> ReplayTiming:
    """When the portal runs its cycles, as the history replay models them: a cycle that preempted is
    followed by the next beat's; a submission asks for one ``CYCLE_BATCH_S`` later."""
    return ReplayTiming(preempt_delay_s=settings.SCHEDULER_INTERVAL_S, arrival_batch_s=settings.CYCLE_BATCH_S)


def topology_level_labels() -> dict[str, str]:
    """``node``, ``rack``, ``zone``, ``nvlink`` -> the node label each stands for here."""
    return topology_levels(policy_from_settings())


def cluster_nodes(*, backend: ClusterBackend | None = None) -> list[GpuNode]:
    """Every node the cluster reports, cordoned ones included."""
    return (backend or cluster_backend()).nodes()


def gpu_capacity(*, backend: ClusterBackend | None = None) -> dict[tuple[str, str], tuple[int, int]]:
    """``(gpu model, capacity type) -> (GPUs, nodes)`` over every GPU node, cordoned ones included
    (they are paid for, so their GPUs count as idle capacity)."""
    counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for node in cluster_nodes(backend=backend):
        if not node.gpu_model or node.gpu_count <= 0:
            continue
        entry = counts[(node.gpu_model, node_capacity_type(node))]
        entry[0] += node.gpu_count
        entry[1] += 1
    return {key: (gpus, nodes) for key, (gpus, nodes) in counts.items()}


@dataclass(frozen=True, slots=True)
class PoolRow:
    """A node pool as the pages show it (``name`` "" for the nodes in no pool)."""

    name: str
    node_selector: str  # "gpu.type=a10g, ..." ("" for the nodes in no pool)
    placement: str  # the policy in effect there
    overcommit_ratio: float
    fraction_capacity_milli: int  # what fractions may share per device
    nodes: int
    gpus: int
    description: str = ""


def node_pool_list(*, backend: ClusterBackend | None = None) -> list[PoolRow]:
    """The node pools in matching order, each with the nodes and GPUs in it now, then the nodes in
    no pool (when there are any)."""
    pools = orm.pools_load()
    descriptions = orm.pool_descriptions()
    default = settings.PLACEMENT_POLICY
    members: dict[int, list[GpuNode]] = defaultdict(list)
    for node in cluster_nodes(backend=backend):
        members[pool_index(dict(node.labels), pools)].append(node)
    rows = [
        PoolRow(
            name=pool.name,
            node_selector=", ".join(f"{k}={v}" for k, v in pool.node_selector),
            placement=pool.placement or default,
            overcommit_ratio=pool.overcommit_ratio,
            fraction_capacity_milli=share_capacity_milli(pool.overcommit_ratio),
            nodes=len(members[i]),
            gpus=sum(n.gpu_count for n in members[i]),
            description=descriptions.get(pool.name, ""),
        )
        for i, pool in enumerate(pools)
    ]
    if members[-1] and pools:
        rest = members[-1]
        rows.append(PoolRow("", "", default, 1.0, 1000, len(rest), sum(n.gpu_count for n in rest)))
    return rows


def node_pools_of(node_names: Iterable[str], *, backend: ClusterBackend | None = None) -> dict[str, str]:
    """The pool each of ``node_names`` is in ("" for none; nodes the cluster no longer has are left out)."""
    wanted = set(node_names)
    if not wanted:
        return {}
    pools = orm.pools_load()
    out = {}
    for node in cluster_nodes(backend=backend):
        if node.name in wanted:
            index = pool_index(dict(node.labels), pools)
            out[node.name] = pools[index].name if index >= 0 else ""
    return out


def cluster_configuration(*, backend: ClusterBackend | None = None, nodes: list[GpuNode] | None = None) -> Snapshot:
    """The cluster as configured, without workloads: its nodes, every queue and quota, and the GPU
    models' memory and MIG profiles (what ``verdict.never_fits`` reads)."""
    cluster_queues, local_queues = queues_load()
    gpu_models = list(GpuModel.objects.all())
    return Snapshot(
        nodes=tuple(cluster_nodes(backend=backend) if nodes is None else nodes),
        cluster_queues=cluster_queues,
        local_queues=local_queues,
        workloads=(),
        mig_profiles=tuple((g.name, tuple(g.mig_profiles or ())) for g in gpu_models),
        gpu_memory_gib=tuple((g.name, g.memory_gib) for g in gpu_models),
        pools=orm.pools_load(),
    )


def job_never_fits(
    *, job: Job, backend: ClusterBackend | None = None, allowed_gpu_models: tuple[str, ...] | None = None
) -> Reason | None:
    """Why ``job`` (saved, its allowed GPU models set) can never run on the cluster as configured, or
    ``None`` when waiting can let it start: the engine's own test (``scheduling.engine.verdict``).
    ``allowed_gpu_models``: their names when the caller has just set them (else they are read).

    ``None`` too when the cluster cannot tell: its API does not answer, or it reports no node at all
    (a cluster being set up, or scaled to zero); the cycle then explains the job as it waits.
    """
    try:
        feasibility = _feasibility(backend or cluster_backend())
    except _unreadable() as exc:
        logger.warning("cluster unreadable, job %s queued unchecked: %s", job.pk, exc)
        return None
    if feasibility is None:
        return None
    # A Ray job's worker groups must each fit too (``podsets``): the first that never does is named.
    if allowed_gpu_models is None:
        workload = workload_from_job(job, [])
    else:  # the same workload, without reading back the models just set
        workload = workload_from_request(job, pk=str(job.pk), now=job.created_at, allowed_gpu_models=allowed_gpu_models)
    return podsets.never_fits(workload, feasibility.never_fits)


# The last configuration's test, with its answers per job signature, kept in the process between
# submissions: (version, Feasibility). Reading and converting every node and queue on each submit
# was most of its time (500 nodes: ~40 ms); the version is one query.
_feasibility_kept: list[tuple[tuple[object, ...], Feasibility | None]] = []


def _feasibility(backend: ClusterBackend) -> Feasibility | None:
    """The "never fits" test over the cluster as configured now (None when it reports no node).

    Kept while the rows of the configuration's tables (``orm.CONFIGURATION_TABLES``) and of the tables
    the backend's nodes come from (its ``node_tables``, when it has them; else the nodes themselves
    are compared) are what they were (``changes.rows_version``, one query): any change to a node, queue,
    quota, GPU model or pool builds it again, so it answers as one built from a fresh read would."""
    node_tables = getattr(backend, "node_tables", None)
    nodes = None if node_tables is not None else cluster_nodes(backend=backend)
    version = rows_version(*orm.CONFIGURATION_TABLES, *(node_tables or ()))
    levels = topology_level_labels()
    key = (
        settings.CLUSTER_BACKEND,
        getattr(backend, "name", type(backend).__name__),
        version,
        None if nodes is None else tuple(nodes),
        tuple(sorted(levels.items())),
    )
    kept = _feasibility_kept[0] if _feasibility_kept else None
    if version is not None and kept is not None and kept[0] == key:
        return kept[1]
    nodes = cluster_nodes(backend=backend) if nodes is None else nodes
    feasibility = Feasibility.of(cluster_configuration(nodes=nodes), levels) if nodes else None
    _feasibility_kept[:] = [(key, feasibility)]
    return feasibility


def _unreadable() -> tuple[type[BaseException], ...]:
    """What reading the cluster raises when its API is down (resolved at run time: importing this
    module never imports ``kubernetes``)."""
    if settings.CLUSTER_BACKEND == "kubernetes":
        from scheduling.adapters.kubernetes_api import ClusterApiError

        return (ClusterApiError,)
    return ()


def runtime_speedup() -> float:
    """How much faster than requested the cluster runs jobs: ``SIM_SPEEDUP`` for the simulated cluster
    (a job of ``runtime_s`` runs ``runtime_s / SIM_SPEEDUP`` wall seconds), 1 for a real one. Expected
    ends and costs are in the cluster's own time scale."""
    if settings.CLUSTER_BACKEND == "simulated":
        return float(settings.SIM_SPEEDUP)
    return 1.0


# -- expected runtimes: what similar jobs of the team actually ran ----------------------------------

HISTORY_RUNS = 200  # a team's latest finished runs that count


def _team_runs(*, outcome: str, teams: Iterable[str]):
    """The latest ``HISTORY_RUNS`` runs that ended in ``outcome`` of each of ``teams`` at most (their
    latest ``HISTORY_RUNS`` × teams of all): (team, requested runtime, started, ended), newest first."""
    teams = list(teams)
    return (
        JobAttempt.objects.filter(
            outcome=outcome, job__team__slug__in=teams, started_at__isnull=False, ended_at__isnull=False
        )
        .order_by("-ended_at")
        .values_list("job__team__slug", "job__runtime_s", "started_at", "ended_at")[: HISTORY_RUNS * len(teams)]
    )


_TEAM_RUNS = Prepared(lambda outcome, team: _team_runs(outcome=outcome, teams=[team]), outcome="\x00o", team="\x00t")


def expected_runtimes(
    workloads: Iterable[Workload], *, speedup: float, running_at: float | None = None
) -> tuple[tuple[tuple[str, float, float], ...], tuple[tuple[str, float, float], ...]]:
    """(id, P50, P90) expected runtime of each workload in the cluster's seconds, from its team's latest
    ``HISTORY_RUNS`` succeeded runs (``runtimes.runtime_model``: runs of the same requested runtime,
    else the team's ratio of run to request, else the request). One query.

    With ``running_at`` (a POSIX time), the second tuple holds the runtime of each started workload
    given how long it has run by then (``Snapshot.running_runtimes``); empty without it."""
    workloads = list(workloads)
    teams = {w.team for w in workloads}
    if not teams:
        return (), ()
    if len(teams) == 1:  # a submission's dry run: its own team's (the SQL compiled once)
        rows = _TEAM_RUNS.rows(outcome=JobState.SUCCEEDED, team=next(iter(teams)))
    else:
        rows = _team_runs(outcome=JobState.SUCCEEDED, teams=teams)
    runs: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for team, asked, started, ended in rows:
        if len(runs[team]) < HISTORY_RUNS and started is not None and ended is not None:
            runs[team].append((float(asked), max(0.0, (ended - started).total_seconds())))
    models: dict[tuple[str, float], Runs | None] = {}
    out: list[tuple[str, float, float]] = []
    running: list[tuple[str, float, float]] = []
    for w in workloads:
        key = (w.team, w.runtime_s)
        if key not in models:
            models[key] = runtime_model(w.runtime_s, runs.get(w.team, ()), speedup)
        model = models[key]
        request_s = w.runtime_s / speedup
        p50, p90 = model.quantiles() if model is not None else (request_s, request_s)
        out.append((w.id, p50, max(p50, p90)))
        if running_at is not None and w.started_at is not None:
            elapsed = max(0.0, running_at - w.started_at)
            p50, p90 = model.quantiles(elapsed) if model is not None else (request_s, request_s)
            running.append((w.id, p50, max(p50, p90)))
    return tuple(out), tuple(running)


def snapshot_for_cycle(*, backend: ClusterBackend, now: datetime) -> Snapshot:
    """The snapshot a cycle plans from: rows, nodes, team holds, the jobs submitted within the last
    arrival period (the forecast expects their like again) and the expected runtimes of all of them
    (of the running ones also given how long they have run). The jobs are the process's last read
    brought up to date (``job_rows.cycle_jobs``)."""
    period = policy_from_settings().arrival_period_s
    snapshot = orm.snapshot_load(
        backend=backend,
        teams_blocked=team_holds(),
        now=now,
        recent_since=now - timedelta(seconds=period) if period > 0 else None,
        kept=cycle_jobs,
    )
    live = {w.id for w in snapshot.workloads}
    runtimes, running = expected_runtimes(
        [*snapshot.workloads, *(w for w in snapshot.recent if w.id not in live)],
        speedup=runtime_speedup(),
        running_at=now.timestamp(),
    )
    return replace(snapshot, runtimes=runtimes, running_runtimes=running)


def _pairs(items: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """``["cpu=4", "memory=8Gi"]`` (settings checked them) as sorted pairs."""
    return tuple(sorted(tuple(item.split("=", 1)) for item in items))  # type: ignore[misc]


def namespace_objects_wanted() -> list[NamespaceObjects]:
    """Each team namespace's ResourceQuota and LimitRange as the portal wants them (the rules are in
    ``scheduling.adapters.k8s.namespaces``): the ceilings of the ClusterQueues the team's local
    queues point at, summed per resource, by ``QuotaBook.ceiling``."""
    cluster_queues, _ = queues_load()
    book = QuotaBook(cluster_queues)
    by_name = {cq.name: cq for cq in cluster_queues}
    models = {g.name: g for g in GpuModel.objects.all()}
    queues_of: dict[str, set[str]] = defaultdict(set)
    for namespace, cq_name in LocalQueue.objects.values_list("team__namespace", "cluster_queue__name"):
        queues_of[namespace].add(cq_name)
    default, default_request = _pairs(settings.K8S_LIMIT_DEFAULT), _pairs(settings.K8S_LIMIT_DEFAULT_REQUEST)
    wanted = []
    for namespace in sorted(Team.objects.values_list("namespace", flat=True)):
        gpu_milli = 0
        mig: dict[str, int] = defaultdict(int)
        cpu: int | None = 0
        memory: int | None = 0
        for name in sorted(queues_of.get(namespace, ())):
            for flavor in by_name[name].flavors:
                ceiling = book.ceiling(name, gpu_key(flavor.gpu_model)) or 0
                gpu_milli += ceiling
                model = models.get(flavor.gpu_model)
                for profile in (model.mig_profiles or []) if model else []:
                    geometry = mig_geometry(profile, model.memory_gib) if model else None
                    if geometry is not None and geometry.gpu_milli:
                        mig[profile] += ceiling // geometry.gpu_milli
            cpu_ceiling, memory_ceiling = book.ceiling(name, CPU), book.ceiling(name, MEMORY)
            cpu = None if cpu is None or cpu_ceiling is None else cpu + cpu_ceiling
            memory = None if memory is None or memory_ceiling is None else memory + memory_ceiling
        hard = {f"requests.{GPU_RESOURCE}": str(gpu_milli // 1000)}
        hard.update({f"requests.{MIG_RESOURCE_PREFIX}{profile}": str(count) for profile, count in mig.items()})
        if cpu is not None and queues_of.get(namespace):
            hard["requests.cpu"] = cpu_quantity(cpu)
        if memory is not None and queues_of.get(namespace):
            hard["requests.memory"] = memory_quantity(memory)
        wanted.append(NamespaceObjects(namespace, tuple(sorted(hard.items())), default, default_request))
    return wanted


def namespace_objects(*, namespaces: Iterable[str] | None = None) -> list[NamespaceObject]:
    """The last namespace sync's findings, one row per namespace and kind (ResourceQuota, LimitRange):
    in sync or not, how it had drifted, what the sync did and how often it repaired it. ``namespaces``
    limits them to some teams' namespaces (None: all, for platform admins and the cluster page)."""
    rows = NamespaceObject.objects.all()
    if namespaces is not None:
        rows = rows.filter(namespace__in=list(namespaces))
    return list(rows.order_by("namespace", "kind"))


@dataclass(frozen=True, slots=True)
class CapacityWanted:
    """Nodes of one pool and GPU model that jobs waiting for capacity asked for (the last cycle's
    ``engine.provisioning`` requests, from their pending reasons). ``nodes`` sums each job's own
    request (an upper bound: jobs that could share a node are counted apart); ``largest`` is the
    biggest single request, the nodes the largest waiting job needs to start at all."""

    pool: str
    gpu_model: str
    jobs: int
    nodes: int
    largest: int


def capacity_wanted(*, user=None) -> list[CapacityWanted]:
    """The capacity signal by pool and GPU model, over pending jobs: all of them (``user`` None: the
    /metrics scrape, platform admins), else those of the teams ``user`` may see."""
    rows = Job.objects.filter(state=JobState.PENDING, pending_reason__details__has_key="provision_nodes")
    if user is not None and not user.is_staff:
        rows = rows.filter(team__in=team_list_for_user(user=user))
    totals: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for reason in rows.values_list("pending_reason", flat=True):
        details = (reason or {}).get("details") or {}
        try:
            nodes = int(details["provision_nodes"])
        except (KeyError, TypeError, ValueError):
            continue
        entry = totals[(str(details.get("provision_pool") or ""), str(details.get("provision_gpu_model") or ""))]
        entry[0] += 1
        entry[1] += nodes
        entry[2] = max(entry[2], nodes)
    return [CapacityWanted(pool, model, *entry) for (pool, model), entry in sorted(totals.items())]


MAX_WORKERS_SHOWN = 8


def training_environment(*, job: Job) -> list[dict[str, str]]:
    """The rendezvous variables each worker of a training job gets (the pods' own, the same on the
    simulated cluster, which has no pods): one mapping per worker, the first ``MAX_WORKERS_SHOWN``."""
    if job.kind != Job.Kind.TRAINING:
        return []
    return [
        {
            e["name"]: e["value"]
            for e in rendezvous_env(
                job_id=job.pk,
                namespace=job.team.namespace,
                replica=worker,
                replicas=job.replicas,
                procs=procs_per_node(gpu=job.gpu),
            )
        }
        for worker in range(min(job.replicas, MAX_WORKERS_SHOWN))
    ]
