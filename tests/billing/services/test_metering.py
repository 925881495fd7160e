"""Metering (``billing.services.metering``): shares, exact units, idempotency, concurrency, the sweeper,
cluster timestamps."""

from __future__ import annotations

import threading
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.db.models import Sum

from billing.models import UsageRecord
from billing.services.metering import metering_run
from billing.utilization import SimulatedUtilization
from portal.jobs.models import Job, JobTransition
from portal.jobs.states import JobState
from tests.billing.conftest import Run, rollup_totals, run_job, utc

T0 = utc(2026, 10, 5, 9, 30)


@pytest.mark.django_db
def test_a_quarter_gpu_for_an_hour_is_a_quarter_gpu_hour(world):
    run_job(world, gpu=0, gpu_milli=250, runs=[Run(T0, T0 + timedelta(hours=1))])
    assert metering_run() == 1
    record = UsageRecord.objects.get()
    assert record.gpu_seconds == Decimal("900.000000")
    assert record.gpus == Decimal("0.250000")
    assert record.gpu_share_7000ths == 1750


@pytest.mark.django_db
def test_a_3g_mig_slice_counts_three_sevenths_of_the_gpu(world):
    run_job(world, gpu=0, mig_profile="3g.40gb", runs=[Run(T0, T0 + timedelta(hours=7))])
    metering_run()
    record = UsageRecord.objects.get()
    assert record.gpu_share_7000ths == 3000
    assert record.gpu_seconds == Decimal("10800.000000")  # 3/7 GPU × 7 h = 3 GPU-hours
    assert int(record.gpu_usage) == 3000 * 7 * 3_600_000_000


@pytest.mark.django_db
def test_cpu_and_memory_are_metered_per_replica(world):
    run_job(world, gpu=1, replicas=2, cpu_milli=1500, memory_mib=2048, runs=[Run(T0, T0 + timedelta(minutes=30))])
    metering_run()
    record = UsageRecord.objects.get()
    assert record.cpu_core_seconds == Decimal("5400")  # 2 × 1.5 cores × 1800 s
    assert record.memory_gib_seconds == Decimal("7200")  # 2 × 2 GiB × 1800 s
    assert record.gpu_seconds == Decimal("3600")


@pytest.mark.django_db
def test_a_preempted_job_is_billed_per_running_interval_with_its_own_model(world):
    run_job(
        world,
        gpu=2,
        runs=[
            Run(T0, T0 + timedelta(minutes=20), "A100-80GB", "spot"),
            Run(T0 + timedelta(hours=1), T0 + timedelta(hours=2), "T4", "on-demand"),
        ],
    )
    assert metering_run() == 2
    first, second = UsageRecord.objects.order_by("start")
    assert (first.gpu_model, first.capacity_type, first.gpu_seconds) == ("A100-80GB", "spot", Decimal(2400))
    assert (second.gpu_model, second.capacity_type, second.gpu_seconds) == ("T4", "on-demand", Decimal(7200))


@pytest.mark.django_db
def test_running_the_metering_twice_changes_nothing(world):
    run_job(world, gpu=1, runs=[Run(T0, T0 + timedelta(hours=3, microseconds=7))])
    run_job(world, gpu=0, gpu_milli=125, runs=[Run(T0, T0 + timedelta(minutes=95))])
    assert metering_run() == 2
    before = (list(UsageRecord.objects.values()), rollup_totals())
    assert metering_run() == 0
    assert (list(UsageRecord.objects.values()), rollup_totals()) == before


@pytest.mark.django_db
def test_the_sweeper_closes_an_interval_left_open_by_a_dead_worker(world):
    history = run_job(world, gpu=1, runs=[Run(T0, T0 + timedelta(hours=2))], final=JobState.FAILED)
    job = history.job
    # The worker died between recording the failure and its history row: the job is final, but the
    # Running interval has no closing transition. The cluster's time of the failure is on the job.
    JobTransition.objects.filter(job=job, to_state=JobState.FAILED).delete()
    assert Job.objects.get(pk=job.pk).finished_at == T0 + timedelta(hours=2)
    assert metering_run() == 1
    record = UsageRecord.objects.get()
    assert (record.start, record.end) == (T0, T0 + timedelta(hours=2))


@pytest.mark.django_db
def test_a_running_job_is_not_metered_until_it_stops(world):
    run_job(world, gpu=1, runs=[Run(T0, None)])
    assert metering_run() == 0
    assert not UsageRecord.objects.exists()


@pytest.mark.django_db
def test_a_job_that_ran_while_the_workers_were_down_is_billed_from_the_cluster_times(world):
    from scheduling.adapters.simulated import SimulatedCluster
    from scheduling.services import cluster_sync

    job = world.submit("vision", gpu=1, runtime_s=7200)
    JobTransition.objects.filter(job=job).update(at=T0 - timedelta(minutes=1))
    detail = {"gpu_model": "A100-80GB", "gpus": "1.000000", "replicas": 1, "capacity_type": "on-demand"}
    from portal.jobs.transitions import job_transition

    job_transition(job=job, to_state=JobState.ADMITTED, at=T0, detail=detail)
    # Workers come back a day later: the cluster reports the pods' own start and finish times.
    cluster = SimulatedCluster(speedup=1.0)
    cluster_sync(backend=cluster, now=T0 + timedelta(days=1))
    assert Job.objects.get(pk=job.pk).state == JobState.SUCCEEDED
    assert metering_run() == 1
    record = UsageRecord.objects.get()
    assert (record.start, record.end) == (T0, T0 + timedelta(hours=2))
    assert record.gpu_seconds == Decimal(7200)


@pytest.mark.django_db
def test_usage_records_carry_the_simulated_utilization(world):
    history = run_job(world, gpu=1, runs=[Run(T0, T0 + timedelta(hours=1))])
    metering_run(source=SimulatedUtilization())
    record = UsageRecord.objects.get()
    expected = SimulatedUtilization().job_utilization(
        job_id=history.job.pk, namespace="team-vision", start=T0, end=T0 + timedelta(hours=1)
    )
    assert record.gpu_util_pct == expected.gpu_util_pct
    assert 5 <= record.gpu_util_pct <= 100


@pytest.mark.django_db(transaction=True)
def test_concurrent_metering_runs_insert_each_interval_once(world):
    for index in range(12):
        start = T0 + timedelta(minutes=17 * index)
        run_job(world, gpu=0, gpu_milli=100 * (index % 9 + 1), runs=[Run(start, start + timedelta(hours=3))])
    barrier = threading.Barrier(3)
    results, errors = [], []

    def meter():
        try:
            barrier.wait()
            results.append(metering_run())
        except Exception as exc:  # surfaced below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=meter) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert sorted(results) == [0, 0, 12]
    assert UsageRecord.objects.count() == 12
    records = UsageRecord.objects.aggregate(gpu=Sum("gpu_usage"))
    assert rollup_totals()["gpu"] == records["gpu"]
