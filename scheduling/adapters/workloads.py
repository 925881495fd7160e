"""A job row as an engine ``Workload``: the columns it is built from (the snapshot's rows and a single
model instance), its request, placement rules, start window and pod sets.

Engine ids: a workload id is the job's primary key as a string; a local queue is ``team/name``; a
cluster queue is its name; a team is its slug.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from types import EllipsisType

from django.conf import settings

from portal.jobs.models import Job, LocalQueue, ReplicaPlacement
from portal.jobs.states import JobState
from scheduling.adapters.contract import (
    SPOT,
    job_tolerations,
)
from scheduling.adapters.k8s.affinity import RulesError, parse_rules
from scheduling.adapters.k8s.ray import pod_sets as ray_pod_sets
from scheduling.engine import model as m
from scheduling.engine.windows import StartWindow, parse_span

logger = logging.getLogger(__name__)


ENGINE_STATE = {
    JobState.PENDING: m.WorkloadState.PENDING,
    JobState.ADMITTED: m.WorkloadState.ADMITTED,
    JobState.RUNNING: m.WorkloadState.RUNNING,
}


def local_queue_key(queue: LocalQueue) -> str:
    return f"{queue.team.slug}/{queue.name}"


def _ts(value: datetime | None) -> float | None:
    return value.timestamp() if value else None


# The job columns (and related names) a workload is built from: one list for both paths below, the
# snapshot's rows (``values_list``) and a single model instance (``workload_from_job``).
WORKLOAD_COLUMNS = (
    "id", "local_queue__team__slug", "local_queue__name", "team__slug", "priority_class__value",
    "priority_class__preemptible", "priority_class__min_runtime_s", "created_at", "gpu", "gpu_milli",
    "mig_profile", "gpu_memory_gib",
    "cpu_milli", "memory_mib", "replicas", "min_available", "runtime_s", "state", "gpu_model__name",
    "started_at", "admitted_at", "updated_at",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class JobSpecPart:
    """What a workload carries from a job's spec that never changes after submission: parsed once per
    job (``jobs_spec_parts``), not once per cycle, so a tenant's large specs cost the cycle nothing
    after the first."""

    node_selector: m.Labels
    tolerations: tuple[m.Toleration, ...]
    rules: m.PlacementRules | None
    start_window: StartWindow | None
    preferred_labels: tuple[tuple[str, str, int], ...] = ()
    pod_sets: tuple[m.PodSet, ...] = ()  # a Ray job's worker groups
    kind: str = ""  # the job's kind ("" for batch): the serving preemption rule reads it
    until_stopped: bool = False  # ``Job.runs_until_stopped``: the forecast gives it no end


# The job columns ``spec_part`` reads besides the placement rules, in its arguments' order.
SPEC_COLUMNS = (
    "node_selector", "tolerations", "spot", "start_after", "start_window", "window_timezone", "off_peak", "ray",
    "kind",
)  # fmt: skip


def spec_part(
    node_selector: dict | None,
    tolerations: list | None,
    spot: bool,
    start_after: datetime | None,
    start_window: str,
    window_timezone: str,
    off_peak: bool,
    ray: dict | None = None,
    kind: str = "",
    *,
    rules: m.PlacementRules | None,
) -> JobSpecPart:
    sets = ray_pod_sets(ray)
    if sets is None:  # a Ray spec the submit path would have refused runs nowhere (as broken rules do)
        logger.warning("a job's Ray spec does not parse; it matches no node")
        rules = m.PlacementRules(required_terms=())
    return JobSpecPart(
        node_selector=m.labels_of(node_selector),
        tolerations=tuple(
            m.Toleration(
                key=t.get("key", ""),
                operator=t.get("operator", "Equal"),
                value=t.get("value", ""),
                effect=t.get("effect", ""),
            )
            for t in job_tolerations(tolerations or [], spot=spot)
        ),
        rules=rules,
        start_window=start_window_of(start_after, start_window, window_timezone, off_peak),
        # A spot job prefers spot nodes (the cheaper capacity it opted in to), as kube-scheduler's
        # preferred node affinity would, and may still run on-demand.
        preferred_labels=((settings.CAPACITY_TYPE_LABEL, SPOT, 100),) if spot else (),
        pod_sets=sets or (),
        kind="" if kind == Job.Kind.BATCH else kind,
        until_stopped=Job.kind_runs_until_stopped(kind),
    )


def workload_from_row(
    row: tuple, *, allowed_gpu_models: tuple[str, ...], spec: JobSpecPart, placements: tuple[m.ReplicaPlacement, ...]
) -> m.Workload:
    """The engine's view of a job from its ``WORKLOAD_COLUMNS`` values."""
    (
        pk, queue_team, queue_name, team, priority, preemptible, min_runtime_s, created_at, gpu, gpu_milli, mig_profile,
        gpu_memory_gib, cpu_milli, memory_mib, replicas, min_available, runtime_s, state, gpu_model,
        started_at, admitted_at, _updated_at,
    ) = row  # fmt: skip
    return m.Workload(
        id=str(pk),
        local_queue=f"{queue_team}/{queue_name}",
        team=team,
        priority=priority,
        preemptible=preemptible,
        min_runtime_s=float(min_runtime_s),
        created_at=created_at.timestamp(),
        resources=m.Resources(
            gpu=gpu,
            gpu_milli=gpu_milli,
            mig_profile=mig_profile or None,
            gpu_memory_gib=gpu_memory_gib,
            cpu_milli=cpu_milli,
            memory_mib=memory_mib,
        ),
        replicas=replicas,
        min_available=min_available,
        allowed_gpu_models=allowed_gpu_models,
        node_selector=spec.node_selector,
        tolerations=spec.tolerations,
        preferred_labels=spec.preferred_labels,
        rules=spec.rules,
        runtime_s=float(runtime_s),
        start_window=spec.start_window,
        state=ENGINE_STATE[JobState(state)],
        gpu_model=gpu_model,
        placements=placements,
        started_at=_ts(started_at or admitted_at),
        pod_sets=spec.pod_sets,
        kind=spec.kind,
        until_stopped=spec.until_stopped,
    )


def workload_from_job(
    job: Job, placements: list[ReplicaPlacement], rules: m.PlacementRules | EllipsisType | None = ...
) -> m.Workload:
    """The engine's view of a job row (``rules``: its placement rules when the caller has them)."""
    return _workload_of(
        job,
        pk=job.pk,
        created_at=job.created_at,
        allowed_gpu_models=tuple(sorted(g.name for g in job.allowed_gpu_models.all())),
        rules=job_rules(job) if rules is ... else rules,
        placements=tuple(p.engine_placement() for p in placements),
    )


def workload_from_request(job: Job, *, pk: str, now: datetime, allowed_gpu_models: tuple[str, ...]) -> m.Workload:
    """The engine's view of a job request that is not saved (a dry run): ``job`` is an unsaved row
    with the request's columns, submitted ``now``."""
    return _workload_of(
        job, pk=pk, created_at=now, allowed_gpu_models=tuple(sorted(allowed_gpu_models)), rules=job_rules(job)
    )


def _workload_of(
    job: Job,
    *,
    pk: object,
    created_at: datetime,
    allowed_gpu_models: tuple[str, ...],
    rules: m.PlacementRules | None,
    placements: tuple[m.ReplicaPlacement, ...] = (),
) -> m.Workload:
    row = (
        pk, job.local_queue.team.slug, job.local_queue.name, job.team.slug, job.priority_class.value,
        job.priority_class.preemptible, job.priority_class.min_runtime_s, created_at, job.gpu, job.gpu_milli,
        job.mig_profile, job.gpu_memory_gib, job.cpu_milli, job.memory_mib, job.replicas, job.min_available,
        job.runtime_s,
        job.state, job.gpu_model.name if job.gpu_model else None, job.started_at, job.admitted_at, job.updated_at,
    )  # fmt: skip
    return workload_from_row(
        row,
        allowed_gpu_models=allowed_gpu_models,
        spec=spec_part(*(getattr(job, name) for name in SPEC_COLUMNS), rules=rules),
        placements=placements,
    )


def job_start_window(job: Job) -> StartWindow | None:
    """A job's start window as the engine's value: its start-after instant and its daily span (the
    off-peak hours for an off-peak job). ``None`` for a job that may start at any time."""
    return start_window_of(job.start_after, job.start_window, job.window_timezone, job.off_peak)


def start_window_of(
    start_after: datetime | None, start_window: str, window_timezone: str, off_peak: bool
) -> StartWindow | None:
    """``job_start_window`` from the column values."""
    span, zone = "", window_timezone or "UTC"
    if off_peak:
        span, zone = settings.OFFPEAK_HOURS, settings.OFFPEAK_TIMEZONE
    elif start_window:
        span = start_window
    if not span and start_after is None:
        return None
    start, end = parse_span(span) if span else (None, None)
    return StartWindow(
        not_before_s=_ts(start_after),
        daily_start_minute=start,
        daily_end_minute=end,
        zone=zone,
    )


def job_rules(job: Job) -> m.PlacementRules | None:
    """A job's placement rules as engine values (``None`` for the many jobs without any)."""
    return _parsed_rules(job.affinity, job.topology_spread_constraints, job.required_topology)


def _parsed_rules(affinity: object, spread: object, level: str) -> m.PlacementRules | None:
    """A row the submit path would have refused (written around it) runs nowhere rather than
    unconstrained."""
    if not affinity and not spread and not level:
        return None
    try:
        return parse_rules(affinity, spread, level)
    except RulesError as exc:
        logger.warning("a job's placement rules do not parse (%s); it matches no node", exc)
        return m.PlacementRules(required_terms=())


# job id -> (its updated_at when read, its spec part). A job's spec never changes after submission (an
# admin's edit saves the row, which moves updated_at): each is read and parsed once per process.
_SPECS_SEEN: dict[int, tuple[datetime, JobSpecPart]] = {}


def jobs_spec_parts(seen: list[tuple[int, datetime]]) -> dict[int, JobSpecPart]:
    """The spec parts (node selector, tolerations, placement rules) of jobs ``(id, updated_at)``, by id."""
    out: dict[int, JobSpecPart] = {}
    missing = []
    for pk, updated_at in seen:
        cached = _SPECS_SEEN.get(pk)
        if cached is not None and cached[0] == updated_at:
            out[pk] = cached[1]
        else:
            missing.append(pk)
    columns = ("pk", "updated_at", "affinity", "topology_spread_constraints", "required_topology", *SPEC_COLUMNS)
    for start in range(0, len(missing), 1000):
        chunk = missing[start : start + 1000]
        for pk, updated_at, affinity, spread, level, *values in Job.objects.filter(pk__in=chunk).values_list(*columns):
            out[pk] = spec_part(*values, rules=_parsed_rules(affinity, spread, level))
            _SPECS_SEEN[pk] = (updated_at, out[pk])
    if len(_SPECS_SEEN) > 2 * len(seen) + 1000:  # forget jobs that left the cycle
        for pk in set(_SPECS_SEEN) - set(out):
            del _SPECS_SEEN[pk]
    return out


def jobs_rules(jobs: list[Job]) -> dict[int, m.PlacementRules | None]:
    """The placement rules of ``jobs`` by id, read once per job as ``jobs_spec_parts`` reads them."""
    parts = jobs_spec_parts([(job.pk, job.updated_at) for job in jobs])
    return {pk: part.rules for pk, part in parts.items()}
