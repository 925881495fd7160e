"""Answers about money and the dry run: a job's and an attempt's cost figures, and the check
(``check_data``) as the API, the submit answer and the form show it."""

from __future__ import annotations

from datetime import UTC, datetime

from rest_framework import serializers

from portal.jobs.services import SpecCheck
from portal.tenants.selectors import team_list_for_user
from scheduling.engine.codec import reason_to_json


def _exact(source: str | None, help_text: str, *, allow_null: bool = False) -> serializers.DecimalField:
    """An exact amount (hours or USD), rounded once to 6 places, as a decimal string."""
    if source is None:  # the attribute of the field's own name (DRF refuses a redundant source)
        return serializers.DecimalField(max_digits=20, decimal_places=6, help_text=help_text, allow_null=allow_null)
    return serializers.DecimalField(
        max_digits=20, decimal_places=6, source=source, help_text=help_text, allow_null=allow_null
    )


class CostFiguresSerializer(serializers.Serializer):
    """Hours and money of ``billing.core.allocation.Figures`` (the object's ``figures``), split into
    GPU, CPU and memory (the job shape's ``gpu_hours`` and ``cost_usd`` are their totals)."""

    gpu_hours = _exact("figures.gpu_hours", "GPU-hours (a quarter GPU for an hour is 0.25).")
    gpu_usd = _exact("figures.gpu_cost", "GPU cost, USD.")
    cpu_core_hours = _exact("figures.cpu_core_hours", "CPU core-hours.")
    cpu_usd = _exact("figures.cpu_cost", "CPU cost, USD.")
    memory_gib_hours = _exact("figures.ram_gib_hours", "Memory GiB-hours.")
    memory_usd = _exact("figures.ram_cost", "Memory cost, USD.")
    total_usd = _exact("figures.total_cost", "GPU + CPU + memory, USD (rounded once from the exact sum).")


class RunCostSerializer(CostFiguresSerializer):
    """One attempt that ran (``billing.selectors.jobs.AttemptRun``)."""

    attempt = serializers.IntegerField(source="number")
    start = serializers.DateTimeField()
    end = serializers.DateTimeField(allow_null=True, help_text="Null while it runs.")
    running = serializers.SerializerMethodField(help_text="Still running: the figures run up to as_of.")
    outcome = serializers.CharField()
    gpu_model = serializers.CharField()
    capacity_type = serializers.CharField()
    gpus = _exact(None, "Billed GPUs held, all replicas together.")
    price_per_gpu_hour = _exact("gpu_usd_per_hour", "GPU price (USD per GPU-hour) at the start of the run.")
    run_s = serializers.FloatField()
    estimated_total_usd = _exact(
        None,
        "Its cost up to its expected end (what it cost, once it ended); null while a job that runs until "
        "stopped (an inference service's replica) runs.",
        allow_null=True,
    )

    def get_running(self, obj) -> bool:
        return obj.end is None


class JobCostSerializer(CostFiguresSerializer):
    """What a job cost so far (``billing.selectors.jobs.JobCostReport``): exact decimals as strings."""

    job = serializers.IntegerField(source="job_id")
    as_of = serializers.DateTimeField(help_text="The time the figures run up to.")
    currency = serializers.SerializerMethodField()
    run_s = serializers.FloatField()
    estimated_total_usd = serializers.DecimalField(
        max_digits=20,
        decimal_places=6,
        allow_null=True,
        help_text="Null while it waits for an admission, and while a job that runs until stopped runs.",
    )
    runs = RunCostSerializer(many=True)

    def get_currency(self, obj) -> str:
        return "USD"


def _iso(ts: float | None) -> str | None:
    return datetime.fromtimestamp(ts, tz=UTC).isoformat().replace("+00:00", "Z") if ts is not None else None


def check_data(result: SpecCheck, *, user) -> dict:
    """The dry run's answer (``POST /api/v1/jobs/check/``, and ``check`` in a submission's answer).

    Victims of the user's own teams are named (job id, name, team); others are only counted."""
    answer = result.answer
    check = answer.check
    own = set(team_list_for_user(user=user).values_list("pk", flat=True)) if check.preempts else set()
    preempts: list[dict] = [
        {"job": v.pk, "name": v.name, "team": v.team.slug, "count": 1} for v in result.victims if v.team_id in own
    ]
    others = len(check.preempts) - len(preempts)
    if others:
        preempts.append({"job": None, "name": "", "team": "", "count": others})
    reason = None
    if check.reason is not None:
        reason = reason_to_json(check.reason)
        reason["waits"] = check.reason.waits
    no_estimate = None
    if check.verdict == "waits" and check.estimated_start_p50 is None:
        why = "budget" if check.reason is not None and check.reason.kind == "budget" else "horizon"
        message = (
            "the team may not start new jobs"
            if why == "budget"
            else "the forecast did not reach it: too many jobs ahead of it, or nothing running ends"
        )
        no_estimate = {"kind": why, "message": message, "details": {}, "waits": True}
    cost = None
    if result.cost is not None:
        figures = result.cost.figures
        cost = {
            "gpu_model": result.cost.gpu_model or None,
            "capacity_type": result.cost.capacity_type,
            "runtime_s": result.cost.runtime_s,
            "per_hour": result.runs_until_stopped,
            "gpu_hours": str(figures.gpu_hours),
            "gpu_usd": str(figures.gpu_cost),
            "cpu_usd": str(figures.cpu_cost),
            "memory_usd": str(figures.ram_cost),
            "total_usd": str(figures.total_cost),
            "price_per_gpu_hour": str(result.cost.price_per_gpu_hour)
            if result.cost.price_per_gpu_hour is not None
            else None,
            "currency": "USD",
        }
    suggestions = [
        {
            "message": s.message,
            "change": change,
            "verdict": s.check.verdict,
            "estimated_start_p50": _iso(s.check.estimated_start_p50),
        }
        for s, change in zip(answer.suggestions, result.suggestion_changes, strict=True)
    ]
    return {
        "verdict": check.verdict,
        "gpu_model": check.gpu_model,
        "placements": [{"replica": i, **_engine_placement_json(p)} for i, p in enumerate(check.placements)],
        "position": check.position,
        "reason": reason,
        "estimated_start_p50": _iso(check.estimated_start_p50),
        "estimated_start_p90": _iso(check.estimated_start_p90),
        "no_estimate": no_estimate,
        "preempts": preempts,
        "cost": cost,
        "suggestions": suggestions,
        "runtime_s": None if result.runs_until_stopped else check.runtime_s,
        "runtime_p90_s": None if result.runs_until_stopped else check.runtime_p90_s,
        "as_of": answer.as_of.isoformat().replace("+00:00", "Z"),
    }


def _engine_placement_json(p) -> dict:
    return {
        "node": p.node,
        "gpu_indices": list(p.gpu_indices),
        "gpu_milli": p.gpu_milli,
        "mig_profile": p.mig_profile or "",
        "mig_slot": p.mig_slot,
        "cpu_milli": p.cpu_milli,
        "memory_mib": p.memory_mib,
    }
