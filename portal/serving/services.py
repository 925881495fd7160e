"""Writes on inference services: create, stop, and the autoscaler's pass.

``services_autoscale`` (beat, every ``SERVING_AUTOSCALE_INTERVAL_S``), for each running service:

1. Read its load (``load.service_load``: Prometheus or the simulated cluster); no answer, no change.
2. Recommend ``ceil(load / target)`` replicas within min and max, and stabilize it against the
   recommendations of the scale-down window (``sizing``).
3. Scale up: submit the missing replicas as jobs; they wait in the team's queue like any job.
   Scale down: cancel the surplus, waiting replicas first, then the youngest running ones; a
   cancelled replica's quota is released at once. A replica that ended on its own is replaced.
4. Record a sample (load, running, active, recommended, desired) for the page's chart.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from portal.jobs.errors import ServiceError
from portal.jobs.models import GpuModel, Job, LocalQueue, PriorityClass
from portal.jobs.services import MAX_RUNTIME_S, JobSpec, job_cancel, job_submit
from portal.jobs.states import FINAL_STATES, JobState
from portal.serving.load import Load, service_load
from portal.serving.models import InferenceService, ServiceReplica, ServiceSample
from portal.serving.sizing import MAX_MODEL_SIZE_B, model_memory_gib, recommend, stabilize
from portal.tenants.selectors import user_is_team_admin

logger = logging.getLogger(__name__)

MAX_SERVICE_REPLICAS = 64
MAX_SERVICES_PER_TEAM = 50


@dataclass(frozen=True, slots=True, kw_only=True)
class ServiceSpec:
    """A checked-shape service request (types by the serializer; rules here)."""

    name: str
    local_queue: LocalQueue
    priority_class: PriorityClass
    image: str
    command: tuple[str, ...] = ()
    model_family: str = ""
    model_size_b: int | None = None
    gpu_memory_gib: int = 0
    cpu_milli: int = 4000
    memory_mib: int = 32768
    allowed_gpu_models: tuple[GpuModel, ...] = ()
    min_replicas: int = 1
    max_replicas: int = 1
    metric: str = InferenceService.Metric.CONCURRENCY
    target_per_replica: float = 1.0
    preemptible: bool = False
    scale_down_stabilization_s: int = 300


def service_spec_validate(spec: ServiceSpec) -> int:
    """The rules of a service request; returns the GPU memory per replica. Raises naming the field."""
    if not 0 <= spec.min_replicas <= MAX_SERVICE_REPLICAS:
        raise ServiceError(f"must be between 0 and {MAX_SERVICE_REPLICAS}", field="min_replicas")
    if not 1 <= spec.max_replicas <= MAX_SERVICE_REPLICAS:
        raise ServiceError(f"must be between 1 and {MAX_SERVICE_REPLICAS}", field="max_replicas")
    if spec.min_replicas > spec.max_replicas:
        raise ServiceError(
            f"min_replicas ({spec.min_replicas}) is above max_replicas ({spec.max_replicas})", field="min_replicas"
        )
    if not spec.target_per_replica > 0:
        raise ServiceError("must be above 0", field="target_per_replica")
    if spec.model_size_b is not None and spec.gpu_memory_gib:
        raise ServiceError("give the model size or the GPU memory, not both", field="gpu_memory_gib")
    if spec.model_size_b is not None:
        if not 1 <= spec.model_size_b <= MAX_MODEL_SIZE_B:
            raise ServiceError(f"must be between 1 and {MAX_MODEL_SIZE_B} (billions)", field="model_size_b")
        return model_memory_gib(spec.model_size_b)
    if not spec.gpu_memory_gib:
        raise ServiceError("give the model size (model_size_b) or the GPU memory per replica", field="model_size_b")
    return spec.gpu_memory_gib


def _replica_spec(service: InferenceService, number: int) -> JobSpec:
    return JobSpec(
        team=service.team,
        local_queue=service.local_queue,
        name=f"{service.name}-r{number}",
        kind=Job.Kind.INFERENCE,
        image=service.image,
        command=tuple(service.command or ()),
        replicas=1,
        gpu_memory_gib=service.gpu_memory_gib,
        cpu_milli=service.cpu_milli,
        memory_mib=service.memory_mib,
        allowed_gpu_models=tuple(service.allowed_gpu_models.all()),
        priority_class=service.priority_class,
        runtime_s=MAX_RUNTIME_S,  # runs until stopped; a replica that ends is replaced
        labels=(("inference-service", service.name),),
        spot=service.preemptible,
    )


def _add_replica(service: InferenceService, *, now: datetime) -> Job:
    number = ServiceReplica.objects.filter(service=service).count() + 1
    job = job_submit(owner=service.owner, spec=_replica_spec(service, number), at=now)
    ServiceReplica.objects.create(service=service, job=job, created_at=now)
    return job


def service_create(*, owner, spec: ServiceSpec, now: datetime | None = None) -> InferenceService:
    """Create a running service and submit its ``min_replicas`` replicas (they queue like jobs).

    The replica request is checked as a job submission is, never-fits included: a model no GPU
    model of the queue can hold is a 400 naming ``model_size_b`` (or ``gpu_memory_gib``)."""
    gpu_memory_gib = service_spec_validate(spec)
    team = spec.local_queue.team
    now = now or timezone.now()
    if InferenceService.objects.filter(team=team, state=InferenceService.State.RUNNING).count() >= (
        MAX_SERVICES_PER_TEAM
    ):
        raise ServiceError(f"a team runs at most {MAX_SERVICES_PER_TEAM} services", field="name", status_code=409)
    if InferenceService.objects.filter(team=team, name=spec.name, state=InferenceService.State.RUNNING).exists():
        raise ServiceError(f"team {team.slug!r} already runs a service {spec.name!r}", field="name", status_code=409)
    size_field = "model_size_b" if spec.model_size_b is not None else "gpu_memory_gib"
    with transaction.atomic():
        service = InferenceService.objects.create(
            name=spec.name,
            team=team,
            owner=owner,
            local_queue=spec.local_queue,
            priority_class=spec.priority_class,
            image=spec.image,
            command=list(spec.command),
            model_family=spec.model_family,
            model_size_b=spec.model_size_b,
            gpu_memory_gib=gpu_memory_gib,
            cpu_milli=spec.cpu_milli,
            memory_mib=spec.memory_mib,
            min_replicas=spec.min_replicas,
            max_replicas=spec.max_replicas,
            metric=spec.metric,
            target_per_replica=spec.target_per_replica,
            preemptible=spec.preemptible,
            scale_down_stabilization_s=spec.scale_down_stabilization_s,
            desired_replicas=spec.min_replicas,
            created_at=now,
        )
        service.allowed_gpu_models.set(spec.allowed_gpu_models)
        try:
            # The first replica is checked even when min_replicas is 0 (then withdrawn), so a
            # service no GPU can hold is refused now rather than failing later.
            for _ in range(max(1, spec.min_replicas)):
                job = _add_replica(service, now=now)
            if spec.min_replicas == 0:
                ServiceReplica.objects.filter(job=job).delete()
                job.delete()
        except ServiceError as exc:
            field = size_field if exc.field in ("gpu_memory_gib", "gpu", "replicas", None) else exc.field
            if exc.field == "queue":
                field = "queue"
            raise ServiceError(exc.message, field=field, status_code=exc.status_code) from None
    return service


def service_stop(*, service: InferenceService, by, now: datetime | None = None) -> InferenceService:
    """Stop a service: every replica is cancelled (its quota released at once)."""
    if service.owner_id != by.pk and not user_is_team_admin(user=by, team=service.team):
        raise ServiceError("only the service's owner or an admin of its team can stop it", status_code=403)
    now = now or timezone.now()
    with transaction.atomic():
        service = InferenceService.objects.select_for_update().get(pk=service.pk)
        if service.state == InferenceService.State.STOPPED:
            return service
        for job in _active_jobs(service):
            job_cancel(job=job, by=service.owner, at=now)
        service.state, service.stopped_at, service.desired_replicas = InferenceService.State.STOPPED, now, 0
        service.save(update_fields=["state", "stopped_at", "desired_replicas"])
    return service


def _active_jobs(service: InferenceService) -> list[Job]:
    return list(
        Job.objects.filter(service_replica__service=service)
        .exclude(state__in=FINAL_STATES)
        .select_related("team", "owner")
        .order_by("created_at", "id")
    )


LoadOf = Callable[[InferenceService], Load | None]


def services_autoscale(*, now: datetime | None = None, load_of: LoadOf | None = None) -> list[ServiceSample]:
    """One autoscaler pass over every running service (the module's steps)."""
    now = now or timezone.now()
    samples = []
    for service_id in InferenceService.objects.filter(state=InferenceService.State.RUNNING).values_list(
        "pk", flat=True
    ):
        try:
            sample = service_autoscale(service_id=service_id, now=now, load_of=load_of)
        except Exception:  # one service's failure must not stop the others
            logger.exception("service %s: autoscaling failed", service_id)
            continue
        if sample is not None:
            samples.append(sample)
    return samples


def service_autoscale(*, service_id: int, now: datetime, load_of: LoadOf | None = None) -> ServiceSample | None:
    with transaction.atomic():
        # The row lock: two autoscaler passes (two beats) never scale one service twice.
        service = InferenceService.objects.select_for_update().select_related("team", "owner").get(pk=service_id)
        if service.state != InferenceService.State.RUNNING:
            return None
        # 1. The load.
        load = load_of(service) if load_of is not None else service_load(service, now=now)
        if load is None:
            return None
        jobs = _active_jobs(service)
        running = sum(1 for j in jobs if j.state == JobState.RUNNING)
        # 2. Recommend and stabilize.
        recommended = recommend(
            load=load.value,
            target=service.target_per_replica,
            min_replicas=service.min_replicas,
            max_replicas=service.max_replicas,
        )
        since = now - timedelta(seconds=service.scale_down_stabilization_s)
        window = ServiceSample.objects.filter(service=service, at__gt=since, at__lte=now).values_list(
            "recommended", flat=True
        )
        desired = stabilize(current=len(jobs), recommended=recommended, window=list(window))
        # 3. Scale.
        for _ in range(desired - len(jobs)):
            try:
                _add_replica(service, now=now)
            except ServiceError as exc:  # e.g. the queue's pending limit: try again next pass
                logger.warning("service %s: could not add a replica: %s", service, exc)
                break
        if desired < len(jobs):
            rank = {JobState.PENDING: 0, JobState.ADMITTED: 1, JobState.RUNNING: 2}
            waiting_first = sorted(
                jobs, key=lambda j: (rank.get(JobState(j.state), 0), -j.created_at.timestamp(), -j.pk)
            )
            for job in waiting_first[: len(jobs) - desired]:
                job_cancel(job=job, by=service.owner, at=now)
        service.desired_replicas = desired
        service.save(update_fields=["desired_replicas"])
        # 4. Record.
        return ServiceSample.objects.create(
            service=service,
            at=now,
            load=load.value,
            running=running,
            active=len(_active_jobs(service)),
            recommended=recommended,
            desired=desired,
            source=load.source,
        )
