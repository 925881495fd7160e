"""A job's figures by attempt (Python) and the job list's annotations (SQL) agree with each other and
with price × running time × share, across price changes, capacity types and unknown GPU models."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from billing.models import PriceBookEntry
from billing.selectors import job_costs, job_list_costed, job_ordering, list_figures
from portal.jobs.models import Job, JobAttempt
from portal.jobs.states import JobState

T0 = datetime(2026, 10, 5, 8, 0, tzinfo=UTC)


def _six(value: Fraction) -> Decimal:
    return (Decimal(value.numerator) / Decimal(value.denominator)).quantize(Decimal("0.000001"), ROUND_HALF_EVEN)


def _attempt(job, number, *, start, end, share=7000, model="A100-80GB", ctype="on-demand", cpu=2000, mem=8192):
    return JobAttempt.objects.create(
        job=job, number=number, queued_at=start, admitted_at=start, started_at=start, ended_at=end,
        outcome=JobState.SUCCEEDED if end else "", gpu_model=model, capacity_type=ctype, replicas=1,
        gpu_share_7000ths=share, cpu_milli=cpu, memory_mib=mem,
    )  # fmt: skip


def _price(resource, model, ctype, at):
    entry = (
        PriceBookEntry.objects.filter(resource=resource, gpu_model=model, capacity_type=ctype, effective_from__lte=at)
        .order_by("-effective_from")
        .first()
    )
    return Fraction(entry.usd_per_hour) if entry else Fraction(0)


def _recompute(attempts, now):
    """Cost from the price book's rows minute by minute (prices change on hour boundaries here)."""
    total = Fraction(0)
    for a in attempts:
        end = a.ended_at or now
        cursor = a.started_at
        while cursor < end:
            step = min(end, cursor + timedelta(minutes=1))
            hours = Fraction(int((step - cursor).total_seconds() * 1_000_000), 3_600_000_000)
            hour = cursor.replace(minute=0, second=0, microsecond=0)
            model = a.gpu_model if PriceBookEntry.objects.filter(resource="gpu", gpu_model=a.gpu_model).exists() else ""
            total += hours * (
                _price("gpu", model, a.capacity_type, hour) * Fraction(a.gpu_share_7000ths, 7000)
                + _price("cpu", "", a.capacity_type, hour) * Fraction(a.cpu_milli, 1000)
                + _price("memory", "", a.capacity_type, hour) * Fraction(a.memory_mib, 1024)
            )
            cursor = step
    return total


@pytest.mark.django_db
def test_a_price_change_during_a_run_prices_each_hour_at_the_price_in_force(world):
    job = world.submit("vision", gpu=1)
    PriceBookEntry.objects.create(
        resource="gpu", gpu_model="A100-80GB", capacity_type="spot", effective_from=T0 + timedelta(hours=1),
        usd_per_hour=Decimal("9.5"),
    )  # fmt: skip
    runs = [
        _attempt(job, 1, start=T0 + timedelta(minutes=20), end=T0 + timedelta(hours=2, minutes=5), ctype="spot"),
        _attempt(job, 2, start=T0 + timedelta(hours=3), end=None, share=3000, model="B300-288GB"),  # unknown model
    ]
    now = T0 + timedelta(hours=4, minutes=30, seconds=7)
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, attempt=2)
    job.refresh_from_db()
    cost = job_costs(jobs=[job], now=now)[job.pk]
    assert cost.cost_usd == _six(_recompute(runs, now))
    assert cost.attempts[1].so_far.total_cost == _six(_recompute(runs[:1], now))
    listed = list_figures(job_list_costed(Job.objects.filter(pk=job.pk), now=now).get())
    assert (listed.run_s, listed.gpu_hours, listed.cost_usd) == (cost.run_s, cost.gpu_hours, cost.cost_usd)


@pytest.mark.django_db
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    runs=st.lists(
        st.tuples(
            st.integers(0, 20 * 3600),  # start, seconds after T0
            st.integers(1, 6 * 3600),  # duration
            st.sampled_from([7000, 3000, 1750, 14000, 0]),  # 1 GPU, 3g slice, 250 milli, 2 GPUs, CPU only
            st.sampled_from(["on-demand", "spot", "reserved"]),
            st.booleans(),  # still running
        ),
        min_size=1,
        max_size=4,
    )
)
def test_the_lists_sql_figures_equal_the_per_attempt_figures(world, runs):
    jobs = []
    now = T0 + timedelta(days=1)
    for index, (start_s, duration_s, share, ctype, running) in enumerate(runs):
        job = world.submit("vision", gpu=1)
        start = T0 + timedelta(seconds=start_s)
        end = None if running else start + timedelta(seconds=duration_s, microseconds=index)
        _attempt(job, 1, start=start, end=end, share=share, ctype=ctype)
        jobs.append(job)
    python = job_costs(jobs=jobs, now=now)
    rows = job_list_costed(Job.objects.filter(pk__in=[j.pk for j in jobs]), now=now).order_by(*job_ordering("-cost")[1])
    for row in rows:
        figures = list_figures(row)
        assert (figures.run_s, figures.gpu_hours, figures.cost_usd) == (
            python[row.pk].run_s,
            python[row.pk].gpu_hours,
            python[row.pk].cost_usd,
        )
    costs = [python[row.pk].cost_usd for row in rows]
    assert costs == sorted(costs, reverse=True)


# --- job_cost_report: the cost endpoint's attempts (GET /api/v1/jobs/<id>/cost/) -------------------------


def _book_price(resource: str, gpu_model: str = "", capacity_type: str = "on-demand") -> Fraction:
    """The price book row in force (one per item here: the seed), as an exact fraction."""
    row = PriceBookEntry.objects.get(resource=resource, gpu_model=gpu_model, capacity_type=capacity_type)
    return Fraction(row.usd_per_hour)


def _hours(start, end) -> Fraction:
    return Fraction(int((end - start) / timedelta(microseconds=1)), 3_600_000_000)


@pytest.mark.django_db
def test_the_report_prices_each_attempt_that_ran_at_its_models_price_and_the_job_in_total(world):
    from billing.selectors import job_cost_report
    from billing.services import price_book_seed_defaults
    from tests.billing.conftest import Run, run_job

    price_book_seed_defaults()
    now = datetime.now(UTC).replace(microsecond=0)
    first = Run(now - timedelta(hours=5, minutes=17), now - timedelta(hours=3, minutes=2), "A100-80GB", "on-demand")
    second = Run(now - timedelta(hours=2, minutes=41), now - timedelta(minutes=9), "T4", "spot")
    history = run_job(world, gpu=2, replicas=1, cpu_milli=3000, memory_mib=10240, runs=[first, second])

    report = job_cost_report(job=history.job, now=now)

    assert [(r.number, r.gpu_model, r.capacity_type, r.start, r.end) for r in report.runs] == [
        (1, "A100-80GB", "on-demand", first.start, first.end),
        (2, "T4", "spot", second.start, second.end),
    ]
    total = Fraction(0)
    for run, got in zip([first, second], report.runs, strict=True):
        assert run.end is not None
        gpu_usd = 2 * _hours(run.start, run.end) * _book_price("gpu", run.gpu_model, run.capacity_type)
        cpu_usd = 3 * _hours(run.start, run.end) * _book_price("cpu", capacity_type=run.capacity_type)
        memory_usd = 10 * _hours(run.start, run.end) * _book_price("memory", capacity_type=run.capacity_type)
        assert got.figures.gpu_hours == _six(2 * _hours(run.start, run.end))
        assert got.figures.gpu_cost == _six(gpu_usd)
        assert got.figures.cpu_cost == _six(cpu_usd)
        assert got.figures.ram_cost == _six(memory_usd)
        assert Fraction(got.gpu_usd_per_hour) == _book_price("gpu", run.gpu_model, run.capacity_type)
        total += gpu_usd + cpu_usd + memory_usd
    assert report.figures.total_cost == _six(total)
    assert report.estimated_total_usd == report.figures.total_cost  # finished: what it cost


@pytest.mark.django_db
def test_the_report_of_a_running_job_runs_up_to_now_and_one_that_never_ran_is_empty(world):
    from billing.selectors import job_cost_report
    from billing.services import price_book_seed_defaults
    from tests.billing.conftest import Run, run_job

    price_book_seed_defaults()
    now = datetime.now(UTC).replace(microsecond=0)
    running = run_job(world, gpu=0, gpu_milli=250, runs=[Run(now - timedelta(minutes=90), None)])
    report = job_cost_report(job=running.job, now=now)
    [run] = report.runs
    assert run.end is None
    assert report.figures.gpu_hours == _six(Fraction(1, 4) * Fraction(3, 2))  # a quarter GPU for 1.5 h
    assert report.figures.gpu_cost == _six(Fraction(1, 4) * Fraction(3, 2) * _book_price("gpu", "A100-80GB"))

    never = world.submit("vision", gpu=1)
    Job.objects.filter(pk=never.pk).update(state=JobState.CANCELLED)
    empty = job_cost_report(job=never, now=now)
    assert empty.runs == []
    assert empty.figures.total_cost == 0


@pytest.mark.django_db
def test_a_job_that_runs_until_stopped_has_no_estimated_total_but_its_hourly_rate(world):
    # An inference service's replica runs until stopped: its runtime_s (the longest a job may ask for) is
    # no end, so no total is estimated from it; the page shows what it costs an hour instead: one GPU,
    # its CPU and memory at the price book's on-demand prices.
    from billing.services import price_book_seed_defaults
    from tests.billing.conftest import Run, run_job

    price_book_seed_defaults()
    now = datetime.now(UTC).replace(microsecond=0)
    replica = run_job(
        world, gpu=1, cpu_milli=4000, memory_mib=8192, kind=Job.Kind.INFERENCE, runtime_s=90 * 24 * 3600,
        runs=[Run(now - timedelta(minutes=30), None)],
    )  # fmt: skip
    batch = run_job(world, gpu=1, cpu_milli=4000, memory_mib=8192, runs=[Run(now - timedelta(minutes=30), None)])
    costs = job_costs(jobs=[replica.job, batch.job], now=now)
    hourly = _book_price("gpu", "A100-80GB") + 4 * _book_price("cpu") + 8 * _book_price("memory")
    served = costs[replica.job.pk]
    assert replica.job.runs_until_stopped
    assert not batch.job.runs_until_stopped
    assert served.estimated_total_usd is None
    assert served.attempts[1].estimated_total_usd is None
    assert served.usd_per_hour == _six(hourly)
    assert served.cost_usd == _six(hourly / 2)  # half an hour so far
    # A batch job is estimated to its requested end (3600 s by default: another half hour) and has no rate.
    assert costs[batch.job.pk].estimated_total_usd == _six(hourly)
    assert costs[batch.job.pk].usd_per_hour is None
