"""The state machine's write keeps every attempt of a job: where it ran, when, and how it ended.

The job goes through the real control loop (cycles on the simulated cluster, the cluster's
observations, the ORM adapter's preemption); the figures are checked against a recomputation from
the price book's rows: price × running time × share, for GPU, CPU and memory.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction

import pytest

from billing.core.units import GPU
from billing.models import PriceBookEntry, UsageRecord
from billing.selectors import job_costs, job_list_costed, list_figures
from billing.services import metering_run
from portal.jobs.models import Job, JobAttempt
from portal.jobs.services import job_submit
from portal.jobs.states import JobState
from scheduling import services
from scheduling.adapters import apply
from scheduling.adapters.contract import Observation
from scheduling.adapters.simulated import SimulatedCluster
from scheduling.engine.model import Preemption
from scheduling.models import SimNode

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


def _cordon(name: str, cordoned: bool = True) -> None:
    SimNode.objects.filter(name=name).update(unschedulable=cordoned)


def _price(resource: str, model: str = "") -> Fraction:
    entry = (
        PriceBookEntry.objects.filter(resource=resource, gpu_model=model, capacity_type="on-demand")
        .order_by("-effective_from")
        .first()
    )
    assert entry is not None
    return Fraction(entry.usd_per_hour)


def _six_places(value: Fraction) -> Decimal:
    return (Decimal(value.numerator) / Decimal(value.denominator)).quantize(Decimal("0.000001"), ROUND_HALF_EVEN)


@pytest.fixture
def requeued_twice(world):
    """A 2-GPU job run three times: evicted by the cluster, preempted, then run to the end."""
    backend = SimulatedCluster(speedup=1.0)
    job = job_submit(owner=world.users["alice"], spec=world.spec(gpu=2, runtime_s=7200), at=T0, request_cycle=False)
    _cordon("a100-1")
    services.cycle_run(now=T0 + timedelta(seconds=60), backend=backend)  # attempt 1 on a100-0
    services.cluster_sync(backend=backend, now=T0 + timedelta(seconds=90))  # pods running since admission
    job.refresh_from_db()
    services.observations_apply(
        [Observation(job.pk, job.attempt, JobState.PENDING, T0 + timedelta(minutes=30), "evicted: node drained")]
    )
    _cordon("a100-0")
    _cordon("a100-1", False)
    services.cycle_run(now=T0 + timedelta(minutes=31), backend=backend)  # attempt 2 on a100-1
    services.cluster_sync(backend=backend, now=T0 + timedelta(minutes=32))
    preempt_at = T0 + timedelta(minutes=75)
    apply.preemption_apply(Preemption(str(job.pk), "", "preempted by a critical job"), now=preempt_at, backend=backend)
    _cordon("a100-0", False)
    _cordon("a100-1")
    services.cycle_run(now=T0 + timedelta(minutes=80), backend=backend)  # attempt 3 on a100-0
    services.cluster_sync(backend=backend, now=T0 + timedelta(minutes=81))
    job.refresh_from_db()
    return job, backend


def test_a_job_requeued_twice_keeps_three_attempts_each_with_its_own_placement_and_times(requeued_twice):
    job, _ = requeued_twice
    attempts = list(JobAttempt.objects.filter(job=job).order_by("number"))
    assert [a.number for a in attempts] == [1, 2, 3]
    assert [a.nodes for a in attempts] == [["a100-0"], ["a100-1"], ["a100-0"]]
    for attempt in attempts:
        assert len(attempt.placements) == 1
        assert len(attempt.placements[0]["gpu_indices"]) == 2
        assert attempt.gpu_model == "A100-80GB"
        assert attempt.capacity_type == "on-demand"
        assert attempt.gpu_share_7000ths == 2 * 7000
    first, second, third = attempts
    assert (first.queued_at, first.admitted_at, first.started_at) == (
        T0,
        T0 + timedelta(seconds=60),
        T0 + timedelta(seconds=60),
    )
    assert (first.ended_at, first.outcome, first.requeued) == (T0 + timedelta(minutes=30), JobState.PENDING, True)
    assert first.end_reason == "evicted: node drained"
    assert (second.queued_at, second.admitted_at) == (T0 + timedelta(minutes=30), T0 + timedelta(minutes=31))
    assert (second.ended_at, second.outcome, second.requeued) == (T0 + timedelta(minutes=75), JobState.PREEMPTED, True)
    assert (third.queued_at, third.admitted_at, third.ended_at) == (
        T0 + timedelta(minutes=75),
        T0 + timedelta(minutes=80),
        None,
    )
    # The job's own times describe the current attempt, not the first one.
    assert job.state == JobState.RUNNING
    assert (job.admitted_at, job.started_at, job.attempt) == (third.admitted_at, third.started_at, 3)
    # The live placement is the third attempt's; the older ones survive only in their attempts.
    assert [p.node for p in job.placements.all()] == ["a100-0"]
    assert job.placements.get().gpu_indices == third.placements[0]["gpu_indices"]


def test_a_requeued_job_waits_without_its_old_admission_and_start_times(world):
    backend = SimulatedCluster(speedup=1.0)
    job = job_submit(owner=world.users["alice"], spec=world.spec(gpu=1), at=T0, request_cycle=False)
    services.cycle_run(now=T0 + timedelta(seconds=10), backend=backend)
    services.cluster_sync(backend=backend, now=T0 + timedelta(seconds=20))
    job.refresh_from_db()
    apply.preemption_apply(Preemption(str(job.pk), "", "preempted"), now=T0 + timedelta(minutes=5), backend=backend)
    job.refresh_from_db()
    assert job.state == JobState.PENDING
    assert (job.admitted_at, job.started_at, job.finished_at) == (None, None, None)
    attempt = job.attempts.get()
    assert (attempt.outcome, attempt.requeued, attempt.ended_at) == (
        JobState.PREEMPTED,
        True,
        T0 + timedelta(minutes=5),
    )
    assert not job.placements.exists()


def test_a_readmitted_job_runs_its_full_time_again_on_the_simulated_cluster(world):
    """The simulated cluster ends a job at its start plus its runtime: the start of the current attempt,
    never the old one (which would end the new attempt at once, before it began)."""
    backend = SimulatedCluster(speedup=1.0)
    job = job_submit(owner=world.users["alice"], spec=world.spec(gpu=1, runtime_s=3600), at=T0, request_cycle=False)
    services.cycle_run(now=T0, backend=backend)
    services.cluster_sync(backend=backend, now=T0 + timedelta(seconds=1))
    apply.preemption_apply(Preemption(str(job.pk), "", "preempted"), now=T0 + timedelta(minutes=50), backend=backend)
    services.cycle_run(now=T0 + timedelta(minutes=70), backend=backend)
    services.cluster_sync(backend=backend, now=T0 + timedelta(minutes=71))
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    services.cluster_sync(backend=backend, now=T0 + timedelta(minutes=70 + 59))
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    services.cluster_sync(backend=backend, now=T0 + timedelta(minutes=70 + 61))
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED
    assert job.finished_at == T0 + timedelta(minutes=130)


def test_gpu_hours_and_cost_of_each_attempt_equal_price_times_duration_times_share(requeued_twice):
    job, backend = requeued_twice
    third = job.attempts.get(number=3)
    end = third.started_at + timedelta(seconds=7200)
    services.cluster_sync(backend=backend, now=end + timedelta(seconds=5))
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED
    assert job.finished_at == end
    gpu, cpu, memory = _price("gpu", "A100-80GB"), _price("cpu"), _price("memory")
    runs_s = {1: 30 * 60 - 60, 2: 75 * 60 - 31 * 60, 3: 7200}
    costs = job_costs(jobs=[job], now=end + timedelta(hours=5))[job.pk]
    total = Fraction(0)
    for number, run_s in runs_s.items():
        hours = Fraction(run_s, 3600)
        # share 2 GPUs; CPU 2 cores and 8 GiB per replica (world.spec), one replica.
        expected = gpu * 2 * hours + cpu * 2 * hours + memory * 8 * hours
        total += expected
        figures = costs.attempts[number]
        assert figures.run_s == run_s
        assert figures.so_far.gpu_hours == _six_places(2 * hours)
        assert figures.so_far.total_cost == _six_places(expected)
        assert figures.estimated_total_usd == figures.so_far.total_cost  # over: the estimate is what it cost
    assert costs.run_s == sum(runs_s.values())
    assert costs.gpu_hours == _six_places(2 * Fraction(sum(runs_s.values()), 3600))
    assert costs.cost_usd == _six_places(total)
    assert costs.estimated_total_usd == sum(a.estimated_total_usd for a in costs.attempts.values())
    # The list's annotations (computed by the database) give the same figures.
    row = job_list_costed(Job.objects.filter(pk=job.pk), now=end + timedelta(hours=5)).get()
    listed = list_figures(row)
    assert (listed.run_s, listed.gpu_hours, listed.cost_usd) == (costs.run_s, costs.gpu_hours, costs.cost_usd)
    # Metering bills the same three runs.
    metering_run()
    records = UsageRecord.objects.filter(job=job).order_by("start")
    assert [r.duration_us for r in records] == [s * 1_000_000 for s in runs_s.values()]
    assert GPU.hours(sum(int(r.gpu_usage) for r in records)) == costs.gpu_hours


def test_a_running_attempt_is_estimated_to_its_expected_end_in_the_clusters_time_scale(world):
    backend = SimulatedCluster(speedup=60.0)
    job = job_submit(owner=world.users["alice"], spec=world.spec(gpu=1, runtime_s=3600), at=T0, request_cycle=False)
    services.cycle_run(now=T0, backend=backend)
    services.cluster_sync(backend=backend, now=T0 + timedelta(seconds=1))
    job.refresh_from_db()
    now = T0 + timedelta(seconds=20)  # a third of its 60 s (3600 s at 60× speed)
    costs = job_costs(jobs=[job], now=now, speedup=60.0)[job.pk]
    rate = _price("gpu", "A100-80GB") + _price("cpu") * 2 + _price("memory") * 8  # per hour
    assert costs.cost_usd == _six_places(rate * Fraction(20, 3600))
    assert costs.estimated_total_usd == _six_places(rate * Fraction(60, 3600))
