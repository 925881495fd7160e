"""The Queues and fairness page and ``GET /api/v1/fairness/``: per ClusterQueue and cohort the quota,
borrowing, lending, use and pending demand per GPU model, each queue's weighted DRF share (the
engine's ``standing.queue_standings``), wait percentiles per queue, the heads of the queues and why
they wait, and the sampled history for the charts."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import Aggregate, Avg, Count, DurationField, F, FloatField, Max
from django.db.models.functions import Trunc

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
    attempts admitted in the last 24 hours and 7 days."""
    out: dict[str, dict[str, dict]] = defaultdict(dict)
    for label, span in WAIT_WINDOWS:
        attempts = JobAttempt.objects.filter(admitted_at__gt=now - span, admitted_at__lte=now)
        wait = F("admitted_at") - F("queued_at")
        key = "job__local_queue__cluster_queue__name"
        if connection.vendor == "postgresql":
            rows = attempts.values(key).annotate(
                n=Count("id"),
                p50=PercentileCont(wait, 0.5, output_field=DurationField()),
                p90=PercentileCont(wait, 0.9, output_field=DurationField()),
            )
            for row in rows:
                out[row[key]][label] = {
                    "admissions": row["n"],
                    "p50_s": round(row["p50"].total_seconds(), 1),
                    "p90_s": round(row["p90"].total_seconds(), 1),
                }
        else:
            waits: dict[str, list[float]] = defaultdict(list)
            for name, admitted, queued in attempts.values_list(key, "admitted_at", "queued_at"):
                waits[name].append((admitted - queued).total_seconds())
            for name, values in waits.items():
                out[name][label] = {
                    "admissions": len(values),
                    "p50_s": round(percentile(values, 0.5) or 0.0, 1),
                    "p90_s": round(percentile(values, 0.9) or 0.0, 1),
                }
    return dict(out)


def queue_heads(*, visible: set[str] | None, now: datetime) -> dict[str, list[dict]]:
    """The first pending jobs of each ClusterQueue in the order the last cycle ranked them (its queue
    position; unranked jobs after, by priority then submission), with why each waits. Another team's
    job is shown without its name."""
    out: dict[str, list[dict]] = {}
    for cq in ClusterQueue.objects.values_list("name", flat=True):
        jobs = (
            Job.objects.filter(state=JobState.PENDING, local_queue__cluster_queue__name=cq)
            .order_by(F("queue_position").asc(nulls_last=True), "-priority_class__value", "created_at", "id")
            .values(
                "id", "name", "team__slug", "queue_position", "priority_class__name", "created_at",
                "pending_reason", "estimated_start",
            )[:HEADS]
        )  # fmt: skip
        rows = []
        for job in jobs:
            mine = visible is None or job["team__slug"] in visible
            reason = job["pending_reason"] or {}
            rows.append(
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
        out[cq] = rows
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
    """``cluster queue -> GPU model -> {at, nominal, used, pending}``: hourly means of the samples of the
    last ``days`` days, in GPUs."""
    rows = (
        QueueSample.objects.filter(at__gt=now - timedelta(days=days), at__lte=now)
        .annotate(hour=Trunc("at", "hour"))
        .values("cluster_queue", "gpu_model", "hour")
        .annotate(
            nominal=Max("nominal_milli"),
            used=Avg("used_milli", output_field=FloatField()),
            pending=Avg("pending_milli", output_field=FloatField()),
        )
        .order_by("cluster_queue", "gpu_model", "hour")
    )
    out: dict[str, dict[str, dict[str, list]]] = defaultdict(dict)
    for row in rows:
        series = out[row["cluster_queue"]].setdefault(
            row["gpu_model"], {"at": [], "nominal": [], "used": [], "pending": []}
        )
        series["at"].append(row["hour"])
        series["nominal"].append(row["nominal"] / 1000)
        series["used"].append(round(row["used"] / 1000, 3))
        series["pending"].append(round(row["pending"] / 1000, 3))
    return dict(out)


def queue_overview(*, user, now: datetime) -> dict:
    """Everything the Queues page and ``GET /api/v1/fairness/`` show."""
    standings = queue_standings_now()
    visible = visible_team_slugs(user=user)
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
        "heads": queue_heads(visible=visible, now=now),
        "warnings": quota_warnings(standings),
    }
