"""The Queues and fairness page and ``GET /api/v1/fairness/``: per ClusterQueue and cohort the quota,
borrowing, lending, use and pending demand per GPU model, each queue's weighted DRF share (the
engine's ``standing.queue_standings``), wait percentiles per queue, the heads of the queues and why
they wait, and the sampled history for the charts."""

from __future__ import annotations

import math
from collections import defaultdict
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Aggregate, Count, DurationField, F, Q, Window
from django.db.models.expressions import OrderBy
from django.db.models.functions import RowNumber

from portal.jobs.models import ClusterQueue, Job, JobAttempt
from portal.jobs.states import JobState
from portal.ops.models import QueueSample
from portal.ops.selectors.cluster import snapshot_now, visible_team_slugs
from portal.ops.selectors.governance import quota_warnings
from scheduling.engine.standing import QueueStanding, Standings, queue_standings

WAIT_WINDOWS = (("24h", timedelta(hours=24)), ("7d", timedelta(days=7)))
HEADS = 5
CHART_DAYS = 7


class PercentileCont(Aggregate):
    """PostgreSQL's ``percentile_cont(p) WITHIN GROUP (ORDER BY expr)``: linear interpolation between
    the two nearest ranks."""

    function = "percentile_cont"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"

    def __init__(self, expression, fraction: float, **extra):
        super().__init__(expression, fraction=float(fraction), **extra)


def percentile(values: list[float], fraction: float) -> float | None:
    """``percentile_cont`` in Python (for databases without it): position ``fraction * (n - 1)`` in the
    sorted values, interpolated linearly."""
    if not values:
        return None
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def queue_standings_now() -> Standings:
    return queue_standings(snapshot_now())


def wait_percentiles(*, now: datetime) -> dict[str, dict[str, dict]]:
    """``cluster queue -> window -> {admissions, p50_s, p90_s}``: the waits (queued to admitted) of the
    attempts admitted in the last 24 hours and 7 days (one query on PostgreSQL: each window's figures
    are aggregates with a ``FILTER``)."""
    out: dict[str, dict[str, dict]] = defaultdict(dict)
    longest = max(span for _, span in WAIT_WINDOWS)
    attempts = JobAttempt.objects.filter(admitted_at__gt=now - longest, admitted_at__lte=now)
    wait = F("admitted_at") - F("queued_at")
    key = "job__local_queue__cluster_queue__name"
    if connection.vendor == "postgresql":
        figures: dict[str, Aggregate] = {}
        for label, span in WAIT_WINDOWS:
            within = Q(admitted_at__gt=now - span)
            figures[f"n_{label}"] = Count("id", filter=within)
            for name, fraction in (("p50", 0.5), ("p90", 0.9)):
                figures[f"{name}_{label}"] = PercentileCont(wait, fraction, filter=within, output_field=DurationField())
        for row in attempts.values(key).annotate(**figures):
            for label, _ in WAIT_WINDOWS:
                if row[f"n_{label}"]:
                    out[row[key]][label] = {
                        "admissions": row[f"n_{label}"],
                        "p50_s": round(row[f"p50_{label}"].total_seconds(), 1),
                        "p90_s": round(row[f"p90_{label}"].total_seconds(), 1),
                    }
        return dict(out)
    waits: dict[tuple[str, str], list[float]] = defaultdict(list)
    for name, admitted, queued in attempts.values_list(key, "admitted_at", "queued_at"):
        for label, span in WAIT_WINDOWS:
            if admitted > now - span:
                waits[(name, label)].append((admitted - queued).total_seconds())
    for (name, label), values in waits.items():
        out[name][label] = {
            "admissions": len(values),
            "p50_s": round(percentile(values, 0.5) or 0.0, 1),
            "p90_s": round(percentile(values, 0.9) or 0.0, 1),
        }
    return dict(out)


def queue_heads(*, visible: set[str] | None, now: datetime, queues: list[str] | None = None) -> dict[str, list[dict]]:
    """The first pending jobs of each ClusterQueue in the order the last cycle ranked them (its queue
    position; unranked jobs after, by priority then submission), with why each waits. Another team's
    job is shown without its name. One query: the rank within each queue is a window function."""
    order: list[OrderBy | str] = [
        F("queue_position").asc(nulls_last=True), F("priority_class__value").desc(), "created_at", "id"
    ]  # fmt: skip
    ranked = (
        Job.objects.filter(state=JobState.PENDING)
        .annotate(rank=Window(RowNumber(), partition_by=F("local_queue__cluster_queue_id"), order_by=order))
        .filter(rank__lte=HEADS)
        .order_by("local_queue__cluster_queue__name", "rank")
        .values(
            "id", "name", "team__slug", "queue_position", "priority_class__name", "created_at", "pending_reason",
            "estimated_start", "local_queue__cluster_queue__name",
        )
    )  # fmt: skip
    names = queues if queues is not None else list(ClusterQueue.objects.values_list("name", flat=True))
    out: dict[str, list[dict]] = {name: [] for name in names}
    for job in ranked:
        mine = visible is None or job["team__slug"] in visible
        reason = job["pending_reason"] or {}
        out.setdefault(job["local_queue__cluster_queue__name"], []).append(
            {
                "id": job["id"] if mine else None,
                "name": (job["name"] or f"job {job['id']}") if mine else "another team's job",
                "team": job["team__slug"],
                "position": job["queue_position"],
                "priority": job["priority_class__name"],
                "waiting_s": round((now - job["created_at"]).total_seconds()),
                "reason_kind": reason.get("kind", ""),
                "reason": reason.get("message", "not yet considered by a cycle"),
                "estimated_start": job["estimated_start"],
            }
        )
    return out


def _queue_row(q: QueueStanding) -> dict:
    return {
        "name": q.name,
        "cohort": q.cohort,
        "weight": q.weight,
        "share": round(q.share, 4),
        "dominant": q.dominant,
        "gpu_models": [
            {
                "gpu_model": r.key.removeprefix("gpu/"),
                "nominal_gpus": r.nominal / 1000,
                "used_gpus": r.used / 1000,
                "borrowed_gpus": r.borrowed / 1000,
                "lent_gpus": r.lent / 1000,
                "pending_gpus": r.pending / 1000,
            }
            for r in q.resources
            if r.key.startswith("gpu/")
        ],
    }


def sample_series(*, now: datetime, days: int = CHART_DAYS) -> dict[str, dict[str, dict[str, list]]]:
    """``cluster queue -> GPU model -> {at, nominal, used, pending}`` in GPUs: the first sample of each
    hour of the last ``days`` days (every sample when they are an hour or more apart), and the latest
    sample, so the charts reach the present (and a portal sampled for less than an hour has a chart).
    Hourly points are read straight from the index on ``at``; averaging 50,000 samples a week costs a
    sort."""
    step_minutes = math.ceil(settings.QUEUE_SAMPLE_INTERVAL_S / 60)
    window = QueueSample.objects.filter(at__gt=now - timedelta(days=days), at__lte=now)
    samples = window
    if step_minutes < 60:
        latest = window.order_by("-at").values_list("at", flat=True).first()
        samples = window.filter(Q(at__minute__lt=step_minutes) | Q(at=latest))
    rows = samples.order_by("at").values_list("cluster_queue", "gpu_model", "at", "nominal_milli", "used_milli",
                                              "pending_milli")  # fmt: skip
    out: dict[str, dict[str, dict[str, list]]] = defaultdict(dict)
    for queue, model, at, nominal, used, pending in rows:
        empty: dict[str, list] = {"at": [], "nominal": [], "used": [], "pending": []}
        series = out[queue].setdefault(model, empty)
        series["at"].append(at)
        series["nominal"].append(nominal / 1000)
        series["used"].append(used / 1000)
        series["pending"].append(pending / 1000)
    return dict(out)


def queue_overview(*, user, now: datetime) -> dict:
    """Everything the Queues page and ``GET /api/v1/fairness/`` show."""
    snapshot = snapshot_now()
    standings = queue_standings(snapshot)
    visible = visible_team_slugs(user=user)
    cluster_gpus: dict[str, int] = defaultdict(int)
    for node in snapshot.nodes:
        if node.gpu_model:
            cluster_gpus[node.gpu_model] += node.gpu_count
    local_queues = [
        {
            "team": lq.team,
            "name": lq.name.split("/", 1)[-1] if visible is None or lq.team in visible else "",
            "cluster_queue": lq.cluster_queue,
            "weight": lq.weight,
            "share": round(lq.share, 4),
            "dominant": lq.dominant,
        }
        for lq in standings.local_queues
    ]
    waits = wait_percentiles(now=now)
    none = {"admissions": 0, "p50_s": None, "p90_s": None}
    for q in standings.cluster_queues:
        for label, _ in WAIT_WINDOWS:
            waits.setdefault(q.name, {}).setdefault(label, dict(none))
    return {
        "cluster_queues": [_queue_row(q) for q in standings.cluster_queues],
        "cohorts": [_queue_row(q) for q in standings.cohorts],
        "local_queues": local_queues,
        "waits": waits,
        "heads": queue_heads(visible=visible, now=now, queues=[q.name for q in standings.cluster_queues]),
        "warnings": quota_warnings(standings, cluster_gpus=cluster_gpus),
    }
