"""What one job cost (``billing.selectors.job_runs.job_cost``), against price × GPU-hours recomputed from the
price book's rows and the job's intervals alone."""

from __future__ import annotations

from datetime import timedelta
from fractions import Fraction

import pytest
from django.utils import timezone

from billing.models import PriceBookEntry
from billing.selectors.job_runs import job_cost
from billing.services import metering_run, price_book_seed_defaults
from portal.jobs.models import Job
from portal.jobs.states import JobState
from tests.billing.conftest import Run, rounded, run_job

pytestmark = pytest.mark.django_db


def price(resource: str, gpu_model: str = "", capacity_type: str = "on-demand") -> Fraction:
    """The price book row in force (one per item here: the seed), as an exact fraction."""
    row = PriceBookEntry.objects.get(resource=resource, gpu_model=gpu_model, capacity_type=capacity_type)
    return Fraction(row.usd_per_hour)


def hours(start, end) -> Fraction:
    return Fraction(int((end - start) / timedelta(microseconds=1)), 3_600_000_000)


def loaded(job: Job) -> Job:
    return Job.objects.select_related("team", "local_queue__cluster_queue", "priority_class", "owner").get(pk=job.pk)


def test_a_preempted_and_requeued_job_costs_each_runs_hours_times_its_models_price(world):
    price_book_seed_defaults()
    now = timezone.now().replace(microsecond=0)
    first = Run(now - timedelta(hours=5, minutes=17), now - timedelta(hours=3, minutes=2), "A100-80GB", "on-demand")
    second = Run(now - timedelta(hours=2, minutes=41), now - timedelta(minutes=9), "T4", "spot")
    history = run_job(world, gpu=2, replicas=1, cpu_milli=3000, memory_mib=10240, runs=[first, second])

    cost = job_cost(job=loaded(history.job), now=now)

    expected_total = Fraction(0)
    assert [(r.gpu_model, r.capacity_type, r.start, r.end, r.running) for r in cost.runs] == [
        ("A100-80GB", "on-demand", first.start, first.end, False),
        ("T4", "spot", second.start, second.end, False),
    ]
    for run, got in zip([first, second], cost.runs, strict=True):
        assert run.end is not None
        gpu_hours = 2 * hours(run.start, run.end)
        gpu_usd = gpu_hours * price("gpu", run.gpu_model, run.capacity_type)
        cpu_usd = 3 * hours(run.start, run.end) * price("cpu", capacity_type=run.capacity_type)
        memory_usd = 10 * hours(run.start, run.end) * price("memory", capacity_type=run.capacity_type)
        assert got.figures.gpu_hours == rounded(gpu_hours)
        assert got.figures.gpu_cost == rounded(gpu_usd)
        assert got.figures.cpu_cost == rounded(cpu_usd)
        assert got.figures.ram_cost == rounded(memory_usd)
        assert Fraction(got.gpu_usd_per_hour) == price("gpu", run.gpu_model, run.capacity_type)
        expected_total += gpu_usd + cpu_usd + memory_usd
    assert cost.figures.total_cost == rounded(expected_total)
    assert cost.figures.gpu_hours == rounded(2 * hours(first.start, first.end) + 2 * hours(second.start, second.end))


def test_a_running_job_costs_up_to_now_and_a_finished_one_the_same_before_and_after_metering(world):
    price_book_seed_defaults()
    now = timezone.now().replace(microsecond=0)
    running = run_job(world, gpu=0, gpu_milli=250, runs=[Run(now - timedelta(minutes=90), None)])
    done = run_job(
        world, team="nlp", gpu=0, mig_profile="3g.40gb", runs=[Run(now - timedelta(hours=3), now - timedelta(hours=1))]
    )

    open_cost = job_cost(job=loaded(running.job), now=now)
    assert [r.running for r in open_cost.runs] == [True]
    assert open_cost.runs[0].end == now
    assert open_cost.figures.gpu_hours == rounded(Fraction(1, 4) * Fraction(3, 2))  # a quarter GPU for 1.5 h
    assert open_cost.figures.gpu_cost == rounded(Fraction(1, 4) * Fraction(3, 2) * price("gpu", "A100-80GB"))

    before = job_cost(job=loaded(done.job), now=now)
    assert before.figures.gpu_hours == rounded(Fraction(3, 7) * 2)  # a 3g slice is 3/7 of the GPU
    metering_run()
    after = job_cost(job=loaded(done.job), now=now + timedelta(hours=1))
    assert after.figures == before.figures


def test_a_job_that_never_ran_costs_nothing(world):
    job = world.submit("vision", gpu=1)
    Job.objects.filter(pk=job.pk).update(state=JobState.CANCELLED)
    cost = job_cost(job=loaded(job), now=timezone.now())
    assert cost.runs == []
    assert cost.figures.total_cost == 0
