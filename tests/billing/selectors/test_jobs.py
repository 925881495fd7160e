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
