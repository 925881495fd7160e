"""``gpuportal.types``: the API's JSON as typed values; unknown fields never break parsing and stay in
``raw``; money and hours are exact."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from gpuportal.types import Check, Job, JobCost, Placement, parse_decimal, parse_time

JOB = {
    "id": 42,
    "name": "resnet",
    "team": "vision",
    "queue": "default",
    "state": "Pending",
    "command": ["python", "train.py"],
    "replicas": 2,
    "gpu": 1,
    "created_at": "2026-11-20T10:00:00.123456Z",
    "pending_reason": {"kind": "quota", "message": "cq-vision: 8 of 8 A100-80GB in use", "details": {"used": 8}},
    "queue_position": 3,
    "estimated_start": "2026-11-20T12:00:00+00:00",
    "placements": [],
    "transitions": [{"from_state": "", "to_state": "Pending", "at": "2026-11-20T10:00:00Z", "reason": "submitted"}],
    "a_field_from_a_newer_portal": {"x": 1},
}


def test_a_job_is_read_with_its_reason_times_and_history_and_keeps_unknown_fields_in_raw():
    job = Job.from_api(JOB)
    assert (job.id, job.name, job.state, job.replicas, job.command) == (
        42,
        "resnet",
        "Pending",
        2,
        ("python", "train.py"),
    )
    assert job.created_at == datetime(2026, 11, 20, 10, 0, 0, 123456, tzinfo=UTC)
    assert job.pending_reason is not None
    assert job.pending_reason.kind == "quota"
    assert job.pending_reason.details == {"used": 8}
    assert job.queue_position == 3
    assert job.transitions[0].to_state == "Pending"
    assert job.raw["a_field_from_a_newer_portal"] == {"x": 1}
    assert not job.done
    assert Job.from_api({**JOB, "state": "Cancelled"}).done


def test_missing_and_malformed_fields_fall_back_instead_of_raising():
    job = Job.from_api(
        {"id": "7", "replicas": None, "queue_position": "", "created_at": "yesterday", "placements": "?"}
    )
    assert (job.id, job.replicas, job.queue_position, job.created_at, job.placements) == (7, 1, None, None, ())
    assert job.pending_reason is None
    assert Job.from_api(None).id == 0


def test_money_and_hours_are_exact_decimals_from_strings_or_numbers():
    cost = JobCost.from_api(
        {"job": 1, "gpu_hours": "0.000278", "total_usd": 1.1, "runs": [{"gpus": "0.428571", "running": True}]}
    )
    assert cost.gpu_hours == Decimal("0.000278")
    assert cost.total_usd == Decimal("1.1")  # the float's shortest repr, not 1.100000000000000088817841970012523
    assert cost.currency == "USD"
    assert cost.running
    assert parse_decimal("not a number") is None
    assert parse_decimal(True) is None


def test_a_dry_run_answer_with_every_field_and_one_with_few():
    full = Check.from_api(
        {
            "verdict": "waits",
            "gpu_model": "A100-80GB",
            "placements": [{"node": "a100-1", "gpu_indices": [4, 5]}],
            "position": 2,
            "reason": {"kind": "capacity", "message": "no node has 2 free GPUs", "waits": True, "details": {}},
            "estimated_start_p50": "2026-11-20T12:00:00Z",
            "estimated_start_p90": "2026-11-20T13:00:00Z",
            "no_estimate": None,
            "preempts": [{"job": 12, "name": "low-prio", "team": "vision", "count": 1},
                         {"job": None, "name": None, "team": None, "count": 3}],
            "as_of": "2026-11-20T10:00:00Z",
            "runtime_s": 3600.0,
            "cost": {"gpu_hours": "4", "gpu_usd": "14.68", "cpu_usd": "0.25", "memory_usd": "0.1", "total_usd": "15.03",
                     "price_per_gpu_hour": "3.67", "capacity_type": "on-demand", "currency": "USD"},
            "suggestions": [{"message": "1 H100 starts now", "change": {"allowed_gpu_models": ["H100-80GB"]}}, "fewer"],
        }
    )  # fmt: skip
    assert full.waits
    assert not full.runs_now
    assert full.reason is not None
    assert full.reason.waits is True
    assert full.placements[0].describe() == "a100-1 GPUs 4,5"
    assert [(v.job, v.name, v.team, v.count) for v in full.preempts] == [
        (12, "low-prio", "vision", 1),
        (None, "", "", 3),
    ]
    assert full.as_of == datetime(2026, 11, 20, 10, tzinfo=UTC)
    assert full.runtime_s == 3600.0
    assert full.cost is not None
    assert full.cost.total_usd == Decimal("15.03")
    assert full.cost.price_per_gpu_hour == Decimal("3.67")
    assert [s.message for s in full.suggestions] == ["1 H100 starts now", "fewer"]
    assert full.suggestions[0].change == {"allowed_gpu_models": ["H100-80GB"]}
    bare = Check.from_api({"verdict": "never", "no_estimate": {"kind": "never", "message": "never fits as configured"}})
    assert bare.no_estimate is not None
    assert bare.no_estimate.kind == "never"
    assert bare.never
    assert (bare.cost, bare.reason, bare.placements, bare.suggestions) == (None, None, (), ())


def test_placements_describe_devices_shares_and_mig_slots():
    assert Placement.from_api({"node": "a", "gpu_indices": [3]}).describe() == "a GPU 3"
    assert Placement.from_api({"node": "a", "gpu_indices": [3], "gpu_milli": 250}).describe() == "a GPU 3 (250 milli)"
    assert (
        Placement.from_api({"node": "a", "mig_profile": "3g.40gb", "mig_slot": 4}).describe() == "a MIG 3g.40gb slot 4"
    )


def test_times_with_z_offsets_or_nothing():
    assert parse_time("2026-11-20T10:00:00Z") == datetime(2026, 11, 20, 10, tzinfo=UTC)
    assert parse_time("2026-11-20T11:00:00+01:00") == datetime(2026, 11, 20, 10, tzinfo=UTC)
    assert parse_time(None) is None


def test_suggestions_in_words_with_the_fields_to_change_and_the_answer_they_get():
    check = Check.from_api(
        {
            "verdict": "waits",
            "suggestions": [
                {
                    "change": "1 GPUs per replica instead of 2",
                    "spec_patch": {"gpu": 1},
                    "answer": {"verdict": "runs_now", "estimated_start_p50": "2026-11-20T10:00:00Z"},
                }
            ],
        }
    )
    [suggestion] = check.suggestions
    assert suggestion.message == "1 GPUs per replica instead of 2"
    assert suggestion.change == {"gpu": 1}
    assert suggestion.verdict == "runs_now"
    assert suggestion.estimated_start == datetime(2026, 11, 20, 10, tzinfo=UTC)
    assert suggestion.raw["spec_patch"] == {"gpu": 1}


def test_a_submission_carries_the_dry_run_of_its_spec_and_the_job_its_p90_and_why_no_estimate():
    job = Job.from_api(
        {**JOB, "estimated_start_p90": "2026-11-20T13:00:00Z", "check": {"verdict": "waits", "position": 3}}
    )
    assert job.estimated_start_p90 == datetime(2026, 11, 20, 13, tzinfo=UTC)
    assert job.check is not None
    assert (job.check.verdict, job.check.position) == ("waits", 3)
    assert Job.from_api(JOB).check is None
    assert Job.from_api({**JOB, "estimated_start": None, "estimate_note": "horizon"}).estimate_note == "horizon"


def test_a_jobs_attempts_and_figures_when_the_portal_gives_them():
    job = Job.from_api(
        {
            **JOB,
            "run_s": 5400.5,
            "gpu_hours": "3.000278",
            "cost_usd": "11.01",
            "estimated_total_usd": None,
            "attempts": [
                {"number": 1, "started_at": "2026-11-20T08:00:00Z", "ended_at": "2026-11-20T09:30:00Z",
                 "outcome": "Preempted", "gpu_model": "A100-80GB", "capacity_type": "spot", "gpus": "2.000000",
                 "nodes": ["a100-1"], "cost_usd": "4.40", "placements": [{"node": "a100-1", "gpu_indices": [0, 1]}]},
            ],
        }
    )  # fmt: skip
    assert job.run_s == 5400.5
    assert (job.gpu_hours, job.cost_usd, job.estimated_total_usd) == (Decimal("3.000278"), Decimal("11.01"), None)
    [attempt] = job.attempts
    assert (attempt.number, attempt.outcome, attempt.gpus, attempt.nodes) == (1, "Preempted", Decimal(2), ("a100-1",))
    assert attempt.placements[0].describe() == "a100-1 GPUs 0,1"
    assert attempt.cost_usd == Decimal("4.40")
    bare = Job.from_api(JOB)  # a portal without these fields
    assert (bare.run_s, bare.gpu_hours, bare.cost_usd, bare.attempts) == (None, None, None, ())


def test_the_spec_type_names_exactly_the_fields_the_portal_accepts():
    """``JobSpec`` (the client's typing of a submission) and the API's submit serializer list the same
    fields: a field added to one and not the other fails here."""
    from typing import get_type_hints

    from gpuportal.types import JobSpec
    from portal.api.job_create import JobCreateSerializer

    assert set(get_type_hints(JobSpec)) == set(JobCreateSerializer().fields)
