"""Prometheus metrics at ``/metrics``, named in Kueue's style (``kueue_*`` → ``portal_*``).

Everything is read from the database at scrape time by one collector, so any number of web and
worker processes report the same figures without a multiprocess registry:

- ``portal_pending_workloads{cluster_queue, local_queue, reason}``: pending jobs and why they wait;
- ``portal_admitted_active_workloads{cluster_queue}``: admitted or running jobs;
- ``portal_admitted_gpus{cluster_queue, local_queue, gpu_model}``: GPUs (shares) those jobs hold;
- ``portal_admission_wait_time_seconds{cluster_queue}``: histogram of time from (re)queueing to
  admission, over the admissions of the last ``METRICS_WAIT_WINDOW_S``;
- ``portal_admitted_workloads_total{cluster_queue}``: admissions so far;
- ``portal_scheduling_cycle_duration_seconds``: histogram of the last 1000 cycles' durations, and
  ``portal_cluster_gpus``;
- ``portal_namespace_object_in_sync{namespace, kind}`` and ``portal_namespace_object_repairs_total``:
  team namespaces' ResourceQuota and LimitRange at the last namespace sync.
- ``portal_capacity_wanted_nodes{pool, gpu_model}`` (and ``_largest_nodes``,
  ``portal_capacity_waiting_workloads``): the capacity signal, new nodes that would let the jobs
  waiting for capacity start.
"""

from __future__ import annotations

import hmac
from collections import Counter, defaultdict
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db.models import Count, Q, Sum
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from portal.jobs.models import Job, JobTransition
from portal.jobs.models import ReplicaPlacement as PlacementRow
from portal.jobs.states import ACTIVE_STATES, JobState
from scheduling.engine.mig import default_device_memory_gib
from scheduling.engine.model import ReplicaPlacement
from scheduling.engine.shares import QUOTA_MILLI_PER_GPU, placement_quota_milli
from scheduling.models import CycleRun
from scheduling.selectors import capacity_wanted, namespace_objects

WAIT_BUCKETS_S = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400)
CYCLE_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


def _histogram(name: str, doc: str, labels: list[str], buckets, series: dict[tuple, list[float]]):
    family = HistogramMetricFamily(name, doc, labels=labels)
    for key, values in sorted(series.items()):
        counts = [sum(1 for v in values if v <= bound) for bound in buckets]
        family.add_metric(
            list(key),
            [(str(b), c) for b, c in zip(buckets, counts, strict=True)] + [("+Inf", len(values))],
            sum(values),
        )
    return family


def _share(gpu_indices: list, gpu_milli: int, mig_profile: str, device_memory_gib: int) -> Decimal:
    """GPUs a replica holds, counted as quota counts them (a MIG slice by its memory share)."""
    placement = ReplicaPlacement(node="", gpu_indices=tuple(gpu_indices), gpu_milli=gpu_milli, mig_profile=mig_profile)
    return Decimal(placement_quota_milli(placement, device_memory_gib)) / Decimal(QUOTA_MILLI_PER_GPU)


class PortalCollector:
    """One collector for every family; each family is one method, read at scrape time."""

    def collect(self):
        runs = list(CycleRun.objects.order_by("-started_at").values_list("duration_ms", "total_gpus")[:1000])
        yield self.pending_workloads()
        yield self.admitted_active_workloads()
        yield self.admitted_gpus()
        yield self.admission_wait_time()
        yield _histogram(
            "portal_scheduling_cycle_duration_seconds",
            "Duration of the last 1000 scheduling cycles.",
            [],
            CYCLE_BUCKETS_S,
            {(): [ms / 1000 for ms, _ in runs]} if runs else {},
        )
        yield self.admitted_workloads()
        yield from self.pods_ready_timeouts()
        yield from self.namespace_objects()
        yield from self.capacity_wanted()
        total = GaugeMetricFamily("portal_cluster_gpus", "GPUs in the cluster at the last cycle.")
        total.add_metric([], runs[0][1] if runs else 0)
        yield total

    def pending_workloads(self) -> GaugeMetricFamily:
        pending = GaugeMetricFamily(
            "portal_pending_workloads",
            "Pending jobs per queue and the kind of reason they wait for.",
            labels=["cluster_queue", "local_queue", "reason"],
        )
        reasons: Counter[tuple[str, str, str]] = Counter()
        for cq, team, lq, reason in Job.objects.filter(state=JobState.PENDING).values_list(
            "local_queue__cluster_queue__name", "local_queue__team__slug", "local_queue__name", "pending_reason"
        ):
            kind = (reason or {}).get("kind") or "not_yet_considered"
            reasons[(cq, f"{team}/{lq}", kind)] += 1
        for key, count in sorted(reasons.items()):
            pending.add_metric(list(key), count)
        return pending

    def admitted_active_workloads(self) -> GaugeMetricFamily:
        active = GaugeMetricFamily(
            "portal_admitted_active_workloads", "Admitted or running jobs.", labels=["cluster_queue"]
        )
        for cq, count in sorted(
            Counter(
                Job.objects.filter(state__in=ACTIVE_STATES).values_list("local_queue__cluster_queue__name", flat=True)
            ).items()
        ):
            active.add_metric([cq], count)
        return active

    def admitted_gpus(self) -> GaugeMetricFamily:
        gpus = GaugeMetricFamily(
            "portal_admitted_gpus",
            "GPUs held by admitted or running jobs (fractions and MIG slices as shares).",
            labels=["cluster_queue", "local_queue", "gpu_model"],
        )
        held: dict[tuple[str, str, str], Decimal] = defaultdict(Decimal)
        for cq, team, lq, model, memory_gib, indices, milli, mig in PlacementRow.objects.filter(
            job__state__in=ACTIVE_STATES
        ).values_list(
            "job__local_queue__cluster_queue__name",
            "job__local_queue__team__slug",
            "job__local_queue__name",
            "job__gpu_model__name",
            "job__gpu_model__memory_gib",
            "gpu_indices",
            "gpu_milli",
            "mig_profile",
        ):
            if indices:
                memory = memory_gib or default_device_memory_gib(model or "")
                held[(cq, f"{team}/{lq}", model or "")] += _share(indices, milli, mig, memory)
        for key, value in sorted(held.items()):
            gpus.add_metric(list(key), float(value))
        return gpus

    def admission_wait_time(self) -> HistogramMetricFamily:
        since = timezone.now() - timedelta(seconds=settings.METRICS_WAIT_WINDOW_S)
        waits: dict[tuple[str, ...], list[float]] = defaultdict(list)
        admitted_jobs = JobTransition.objects.filter(to_state=JobState.ADMITTED, at__gte=since).values("job_id")
        queued_at: dict[int, datetime] = {}
        for job_id, target, at, cq in (
            JobTransition.objects.filter(job_id__in=admitted_jobs, to_state__in=[JobState.PENDING, JobState.ADMITTED])
            .order_by("job_id", "id")
            .values_list("job_id", "to_state", "at", "job__local_queue__cluster_queue__name")
        ):
            if target == JobState.PENDING:
                queued_at[job_id] = at
            elif job_id in queued_at and at >= since:
                waits[(cq,)].append(max(0.0, (at - queued_at.pop(job_id)).total_seconds()))
        return _histogram(
            "portal_admission_wait_time_seconds",
            "Time from (re)queueing to admission.",
            ["cluster_queue"],
            WAIT_BUCKETS_S,
            waits,
        )

    def admitted_workloads(self) -> CounterMetricFamily:
        admitted = CounterMetricFamily(
            "portal_admitted_workloads", "Admissions so far (a requeued job counts again).", labels=["cluster_queue"]
        )
        for cq, count in sorted(
            Counter(
                JobTransition.objects.filter(to_state=JobState.ADMITTED).values_list(
                    "job__local_queue__cluster_queue__name", flat=True
                )
            ).items()
        ):
            admitted.add_metric([cq], count)
        return admitted

    def pods_ready_timeouts(self):
        """Admissions whose pods never ran (Kueue's waitForPodsReady): how many, the quota-seconds they
        held, and the jobs waiting out a back-off now."""
        failures = CounterMetricFamily(
            "portal_pods_ready_timeouts",
            "Admissions whose pods did not run within ADMITTED_TIMEOUT_S (requeued or failed).",
            labels=["cluster_queue"],
        )
        held = CounterMetricFamily(
            "portal_quota_held_without_running_seconds",
            "Seconds of quota held by admissions whose pods never ran.",
            labels=["cluster_queue"],
        )
        backoff = GaugeMetricFamily(
            "portal_backoff_workloads",
            "Pending jobs waiting out a back-off after a failed start.",
            labels=["cluster_queue"],
        )
        now = timezone.now()
        rows = (
            Job.objects.filter(start_failures__gt=0)
            .values("local_queue__cluster_queue__name")
            .annotate(
                failures=Sum("start_failures"),
                held=Sum("quota_held_s"),
                waiting=Count("id", filter=Q(state=JobState.PENDING, not_before__gt=now)),
            )
            .order_by("local_queue__cluster_queue__name")
        )
        for row in rows:
            cq = row["local_queue__cluster_queue__name"]
            failures.add_metric([cq], row["failures"])
            held.add_metric([cq], row["held"])
            backoff.add_metric([cq], row["waiting"])
        return failures, held, backoff

    def namespace_objects(self):
        """Team namespaces kept in step: whether each ResourceQuota and LimitRange matched at the last
        namespace sync, and how often a sync found one drifted and rewrote it."""
        in_sync = GaugeMetricFamily(
            "portal_namespace_object_in_sync",
            "1 when the namespace's ResourceQuota or LimitRange matched the portal's at the last sync.",
            labels=["namespace", "kind"],
        )
        repairs = CounterMetricFamily(
            "portal_namespace_object_repairs",
            "Times the namespace sync found the object absent or drifted and rewrote it.",
            labels=["namespace", "kind"],
        )
        for row in namespace_objects():
            in_sync.add_metric([row.namespace, row.kind], 1 if row.in_sync else 0)
            repairs.add_metric([row.namespace, row.kind], row.repairs)
        return in_sync, repairs

    def capacity_wanted(self) -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        """The capacity signal (``scheduling.engine.provisioning``): what a node autoscaler reads."""
        nodes = GaugeMetricFamily(
            "portal_capacity_wanted_nodes",
            "New nodes of a pool (and GPU model) that would let the jobs waiting for capacity start: the "
            "sum of each job's own request, an upper bound.",
            labels=["pool", "gpu_model"],
        )
        largest = GaugeMetricFamily(
            "portal_capacity_wanted_largest_nodes",
            "The nodes of a pool the largest job waiting for capacity needs to start.",
            labels=["pool", "gpu_model"],
        )
        jobs = GaugeMetricFamily(
            "portal_capacity_waiting_workloads",
            "Jobs waiting for capacity that new nodes of a pool would let start.",
            labels=["pool", "gpu_model"],
        )
        for row in capacity_wanted():
            nodes.add_metric([row.pool, row.gpu_model], row.nodes)
            largest.add_metric([row.pool, row.gpu_model], row.largest)
            jobs.add_metric([row.pool, row.gpu_model], row.jobs)
        return nodes, largest, jobs


def metrics_view(request: HttpRequest) -> HttpResponse:
    """Prometheus exposition: a scrape sends ``Authorization: Bearer <METRICS_TOKEN>``.

    Closed by default: with no token configured the endpoint answers 403 (set METRICS_TOKEN)."""
    token = settings.METRICS_TOKEN
    if not token:
        return HttpResponse("metrics are off: set METRICS_TOKEN\n", status=403, content_type="text/plain")
    given = request.headers.get("Authorization", "")
    if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
        return HttpResponse("unauthorized\n", status=401, content_type="text/plain")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PortalCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
