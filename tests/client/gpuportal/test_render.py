"""``gpuportal.render``: the CLI's human text for a dry run, a job and a job's cost."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from gpuportal.render import check_text, duration, job_cost_text, job_table, usd
from gpuportal.types import Check, Job, JobCost

NOW = datetime(2026, 11, 20, 10, 0, tzinfo=UTC)
COST = {"gpu_hours": "2", "gpu_usd": "7.34", "cpu_usd": "0.25", "memory_usd": "0.0672", "total_usd": "7.6572",
        "price_per_gpu_hour": "3.67", "capacity_type": "on-demand", "currency": "USD"}  # fmt: skip


def test_a_dry_run_reads_as_a_sentence_per_verdict():
    runs_now = Check.from_api(
        {"verdict": "runs_now", "gpu_model": "A100-80GB", "placements": [{"node": "a100-0", "gpu_indices": [0, 1]}],
         "cost": COST}
    )  # fmt: skip
    assert check_text(runs_now, NOW).splitlines() == [
        "runs now on A100-80GB: a100-0 GPUs 0,1",
        "  estimated cost: 2 GPU-hours × $3.67/GPU-hour on-demand = $7.34 GPU + $0.25 CPU + $0.07 memory = $7.66",
    ]
    waits = Check.from_api(
        {"verdict": "waits", "position": 2, "reason": {"message": "cq-vision: 8 of 8 A100-80GB in use"},
         "estimated_start_p50": (NOW + timedelta(minutes=30)).isoformat(),
         "estimated_start_p90": (NOW + timedelta(hours=2)).isoformat(),
         "preempts": [{"job": 12, "name": "sweep", "team": "vision", "count": 1},
                      {"job": None, "name": None, "team": None, "count": 2}],
         "suggestions": [{"message": "ask for T4: starts now"}]}
    )  # fmt: skip
    lines = check_text(waits, NOW).splitlines()
    assert lines[0] == "waits: #2 in queue, cq-vision: 8 of 8 A100-80GB in use"
    assert "(in 30 min), P90" in lines[1]
    assert "(in 2 h 0 min)" in lines[1]
    assert lines[2] == "  would preempt job 12 sweep (vision), 2 jobs of other teams"
    assert lines[3] == "  sooner: ask for T4: starts now"
    replica = Check.from_api(
        {"verdict": "runs_now", "gpu_model": "A100-80GB", "placements": [{"node": "a100-0", "gpu_indices": [0]}],
         "cost": {**COST, "gpu_hours": "1", "runtime_s": 3600, "per_hour": True}}
    )  # fmt: skip
    assert check_text(replica, NOW).splitlines()[1].endswith("= $7.66 an hour (it runs until stopped)")
    never = Check.from_api({"verdict": "never", "reason": {"message": "the largest node has 8 GPUs; 16 asked"}})
    assert check_text(never, NOW) == "never fits: the largest node has 8 GPUs; 16 asked"
    unknown = Check.from_api(
        {"verdict": "waits", "position": 9, "no_estimate": {"kind": "horizon", "message": "beyond 7 days"}}
    )
    assert check_text(unknown, NOW).splitlines()[1] == "  no start estimate: beyond 7 days"


def test_a_jobs_cost_lists_each_run():
    cost = JobCost.from_api(
        {
            "job": 42, "gpu_hours": "1.5", "gpu_usd": "5.505", "cpu_usd": "0.1", "memory_usd": "0.01",
            "total_usd": "5.615", "currency": "USD",
            "runs": [
                {"start": "2026-11-20T08:00:00Z", "end": "2026-11-20T08:45:00Z", "gpu_model": "A100-80GB",
                 "capacity_type": "spot", "gpus": "2", "gpu_hours": "1.5", "price_per_gpu_hour": "1.468",
                 "total_usd": "2.2"},
            ],
        }
    )  # fmt: skip
    text = job_cost_text(cost).splitlines()
    assert text[0] == "job 42: 1.5 GPU-hours; $5.50 GPU + $0.10 CPU + $0.01 memory = $5.62 USD"
    assert "(45 min 00 s) A100-80GB spot, 2 GPUs → 1.5 GPU-hours at $1.47/GPU-hour; total $2.20" in text[1]
    assert job_cost_text(JobCost.from_api({"job": 1})).endswith("it has not run")


def test_amounts_and_durations():
    assert usd(Decimal("1234.5")) == "$1,234.50"
    assert usd(Decimal("0.000983")) == "$0.000983"
    assert usd(Decimal(0)) == "$0.00"
    assert usd(None) == "?"
    assert duration(timedelta(seconds=0.5)) == "0.5 s"
    assert duration(timedelta(hours=1, minutes=5)) == "1 h 05 min"


def test_the_job_table_lines_up_its_columns():
    jobs = [
        Job.from_api({"id": 1, "name": "a", "state": "Pending", "queue_position": 2, "team": "vision",
                      "queue": "default", "gpu": 2, "replicas": 1}),
        Job.from_api({"id": 10, "name": "long-name", "state": "Running", "team": "vision", "queue": "default",
                      "gpu_milli": 250, "replicas": 4, "gpu_model": "A100-80GB"}),
    ]  # fmt: skip
    lines = job_table(jobs).splitlines()
    assert lines[0].split() == ["ID", "NAME", "STATE", "TEAM/QUEUE", "GPU", "MODEL", "SUBMITTED"]
    assert lines[1].split()[:4] == ["1", "a", "Pending", "#2"]
    assert "4 × 0.25 GPU" in lines[2]
    assert lines[1].index("vision") == lines[2].index("vision")


def test_the_job_table_adds_gpu_hours_and_cost_when_the_portal_reports_them():
    costed = Job.from_api(
        {"id": 3, "name": "c", "state": "Succeeded", "gpu": 1, "gpu_hours": "0.5", "cost_usd": "1.835"}
    )
    lines = job_table([costed]).splitlines()
    assert lines[0].split() == ["ID", "NAME", "STATE", "TEAM/QUEUE", "GPU", "MODEL", "GPU-H", "COST", "SUBMITTED"]
    assert lines[1].split()[-3:] == ["0.5", "$1.84", "-"]  # then the (unknown) submission time
