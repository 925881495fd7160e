"""The SQL of ``billing.sql`` and the Python core price usage the same way, on generated usage.

The cost formula is defined once (``billing.core.units.Meter``); the SQL builds its expressions from the
same constants. These properties check that the two paths agree to the last unit:

* ``TeamCostHourly`` priced incrementally in Python (``cost_rollup_add``) equals the table priced as a
  whole in SQL (``cost_rollup_reprice``): the same exact cost numerators and the same chart floats.
* every allocation path gives the window totals of the usage records priced in Python: the priced
  per-team rollup, the hourly rollup summed per price segment, the hourly rollup priced per row in
  SQL, and the rollup per job owner and label set; their step figures agree to rounding.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from billing.core.allocation import Allocation, AllocationQuery, Figures
from billing.core.intervals import RunInterval
from billing.core.prices import CAPACITY_TYPES
from billing.core.usage import Utilization
from billing.models import PriceBookEntry, TeamCostDaily, TeamCostHourly, UsageRecord
from billing.records import usage_record
from billing.selectors.allocation import (
    AllocationPath,
    allocation_inputs,
    cost_totals,
    group_path,
    record_path,
    rollup_path,
    rollup_shared_idle_path,
    team_cost_path,
)
from billing.selectors.invoices import invoice_lines
from billing.selectors.prices import cost_rollup_current
from billing.services.rollups import cost_rollup_reprice, metering_lock, rollup_add
from billing.sql import ROLLUP_AGGREGATES
from portal.jobs.models import Job
from scheduling.engine.shares import billed_gpus
from tests.billing.conftest import utc

T0 = utc(2026, 10, 5)
CATALOGUE = ["A100-80GB", "T4", ""]  # "": CPU only, and the GPU price fallback
UNCATALOGUED = "B200"  # a model the catalogue does not know: priced by the fallback entries
HOUR_US = 3600 * 10**6

usage = st.lists(
    st.tuples(
        st.integers(0, 3),  # job
        st.sampled_from([*CATALOGUE, UNCATALOGUED]),
        st.sampled_from(CAPACITY_TYPES),
        st.integers(-5 * HOUR_US, 48 * HOUR_US),  # start, µs after T0
        st.integers(1, 30 * HOUR_US),  # duration, µs
        st.sampled_from([0, 1000, 1750, 3000, 7000, 14000, 56000]),  # billed units: 0, 1g, ¼, 3g, 1, 2, 8 GPUs
        st.one_of(st.none(), st.floats(0, 100)),  # utilization %
    ),
    min_size=1,
    max_size=12,
)
price_changes = st.lists(
    st.tuples(
        st.sampled_from(["gpu", "cpu", "memory"]),
        st.sampled_from(CATALOGUE),
        st.sampled_from(CAPACITY_TYPES),
        st.integers(-6 * 3600, 60 * 3600),  # effective from, seconds after T0
        st.integers(0, 50 * 10**6),  # USD per hour in 10^-6
    ),
    max_size=6,
)
AGGREGATES = [*sorted(ROLLUP_AGGREGATES), "owner", "label:capacity-type", "label:absent"]
"""The hourly rollup's aggregates, and the group rollup's (a label every record has, one none has)."""
windows = st.tuples(st.integers(-3, 40), st.integers(1, 60), st.sampled_from([1, 2, 5, 24]))


def bench_jobs(world) -> list[Job]:
    """Four jobs, two per team, with different CPU and memory requests (made once per test)."""
    jobs = list(Job.objects.filter(name__startswith="sql-").order_by("name"))
    if not jobs:
        for index, team in enumerate(["vision", "vision", "nlp", "nlp"]):
            world.submit(team, name=f"sql-{index}", gpu=1, replicas=1 + index % 2, cpu_milli=500 * (index + 1))
    related = ("team", "local_queue__cluster_queue", "priority_class", "owner")
    return list(Job.objects.filter(name__startswith="sql-").select_related(*related).order_by("name"))


def generated_records(jobs: list[Job], rows: list[tuple[Any, ...]]) -> list[UsageRecord]:
    records: dict[tuple[int, datetime], UsageRecord] = {}
    for job_index, model, ctype, start_us, duration_us, units, util in rows:
        job = jobs[job_index]
        start = T0 + timedelta(microseconds=start_us)
        detail = {"gpu_model": model, "gpus": str(billed_gpus(units)), "replicas": job.replicas, "capacity_type": ctype}
        interval = RunInterval(job.pk, start, start + timedelta(microseconds=duration_us), detail)
        records[(job.pk, start)] = usage_record(job, interval, utilization=Utilization(util, None))
    return list(records.values())


def price_book_change(changes: list[tuple[Any, ...]]) -> None:
    for resource, model, ctype, at_s, micro_usd in changes:
        PriceBookEntry.objects.get_or_create(
            resource=resource,
            gpu_model=model if resource == "gpu" else "",
            capacity_type=ctype,
            effective_from=T0 + timedelta(seconds=at_s),
            defaults={"usd_per_hour": Decimal(micro_usd).scaleb(-6)},
        )


def team_cost_rows() -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """``TeamCostHourly``: (exact and money columns), (utilization weights: floats summed in any order)."""
    rows = TeamCostHourly.objects.order_by("epoch_hour", "team_id")
    exact = rows.values_list(
        "epoch_hour", "team_id", "gpu_usage", "cpu_milli_us", "memory_mib_us", "gpu_cost_units", "cpu_cost_units",
        "memory_cost_units", "gpu_hours", "gpu_cost_usd", "cpu_core_hours", "cpu_cost_usd", "ram_gib_hours",
        "ram_cost_usd", "total_cost_usd", "gpu_util_measured_usage",
    )  # fmt: skip
    return list(exact), list(rows.values_list("gpu_util_usage", "gpu_efficiency"))


def team_cost_days() -> list[tuple[tuple[int, int], tuple[Any, ...], float]]:
    """``TeamCostDaily``: ((day, team), exact columns, utilization weight)."""
    rows = TeamCostDaily.objects.order_by("epoch_day", "team_id").values_list(
        "epoch_day", "team_id", "gpu_usage", "cpu_milli_us", "memory_mib_us", "gpu_cost_units", "cpu_cost_units",
        "memory_cost_units", "gpu_util_measured_usage", "gpu_util_usage",
    )  # fmt: skip
    return [((r[0], r[1]), tuple(r[2:9]), r[9]) for r in rows]


def hours_per_day(hour_rows: list[tuple[Any, ...]]) -> dict[tuple[int, int], tuple[Any, ...]]:
    """``team_cost_rows``' exact hourly columns summed per (UTC day, team): what each day must hold."""
    days: dict[tuple[int, int], list[Any]] = {}
    for hour, team, *columns in hour_rows:
        exact = [*columns[:6], columns[13]]  # usage and cost numerators, and the measured usage
        summed = days.setdefault((hour // 24, team), [0] * len(exact))
        days[hour // 24, team] = [a + b for a, b in zip(summed, exact, strict=True)]
    return {key: tuple(value) for key, value in days.items()}


def assert_same_allocation(got: Allocation, expected: Allocation) -> None:
    """The same exact totals (efficiency to its 4 decimals' rounding) and the same step figures to
    float rounding."""
    assert_same_totals(got.totals, expected.totals)
    for (_, _, steps), (_, _, expected_steps) in zip(got.steps, expected.steps, strict=True):
        assert steps.keys() == expected_steps.keys()
        for group, step in steps.items():
            money = step._replace(gpu_efficiency=0.0)
            assert money == pytest.approx(expected_steps[group]._replace(gpu_efficiency=0.0), rel=1e-9, abs=1e-6)


def assert_same_totals(got: dict[str, Figures], expected: dict[str, Figures]) -> None:
    """The same exact window totals (efficiency to its 4 decimals' rounding)."""
    assert {g: f._replace(gpu_efficiency=None) for g, f in got.items()} == {
        g: f._replace(gpu_efficiency=None) for g, f in expected.items()
    }
    for group, figures in got.items():
        expected_efficiency = expected[group].gpu_efficiency
        assert (figures.gpu_efficiency is None) == (expected_efficiency is None)
        assert (figures.gpu_efficiency or 0) == pytest.approx(expected_efficiency or 0, abs=1.01e-4)


@pytest.mark.django_db
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=usage, changes=price_changes, window=windows, aggregate=st.sampled_from(AGGREGATES))
def test_sql_and_python_pricing_give_the_same_figures(world, rows, changes, window, aggregate):
    jobs = bench_jobs(world)
    with transaction.atomic():  # each example on its own data, rolled back at the end
        price_book_change(changes)
        records = generated_records(jobs, rows)
        UsageRecord.objects.bulk_create(records)
        half = len(records) // 2
        with metering_lock():
            rollup_add(records[:half])  # the first rollup prices TeamCostHourly in SQL, as a whole
            rollup_add(records[half:])  # then new increments are priced in Python
        assert cost_rollup_current()
        incremental = team_cost_rows()
        incremental_days = team_cost_days()
        cost_rollup_reprice()
        assert team_cost_rows()[0] == incremental[0]
        # The daily rollup: incremental sums per day equal the hours summed per UTC day.
        days = team_cost_days()
        assert [(key, exact) for key, exact, _util in days] == [(key, exact) for key, exact, _util in incremental_days]
        for (_key, _exact, util), (_, _, util_was) in zip(days, incremental_days, strict=True):
            assert util == pytest.approx(util_was, rel=1e-9)  # floats summed in another order
        assert {key: exact for key, exact, _util in team_cost_days()} == hours_per_day(team_cost_rows()[0])
        for (util, efficiency), (util_was, efficiency_was) in zip(team_cost_rows()[1], incremental[1], strict=True):
            assert util == pytest.approx(util_was, rel=1e-9)
            assert (efficiency is None) == (efficiency_was is None)
            assert (efficiency or 0) == pytest.approx(efficiency_was or 0, rel=1e-9)

        start_h, hours, step = window
        start = T0 + timedelta(hours=start_h)
        query = AllocationQuery(
            start, start + timedelta(hours=hours), step, aggregate, show_idle=False, include_running=False
        )
        inputs = allocation_inputs(query, now=query.end)
        expected = record_path(inputs)  # usage records priced in Python
        paths: list[AllocationPath] = [rollup_path if aggregate in ROLLUP_AGGREGATES else group_path]
        if aggregate in ("namespace", "team"):
            paths.append(team_cost_path)
        if aggregate in ROLLUP_AGGREGATES and not any(record.gpu_model == UNCATALOGUED for record in records):
            paths.append(rollup_shared_idle_path)  # see the next test
        for path in paths:
            assert_same_allocation(path(inputs), expected)
            # Totals only (the cost page's model charts and breakdowns): no step query, the same totals.
            assert_same_totals(path(replace(inputs, steps=False)).group_totals(), expected.group_totals())
        assert_same_totals(cost_totals(query, now=query.end), expected.group_totals())
        # Windows with whole UTC days inside read those days from TeamCostDaily, the rest by the hour.
        for first_hour, hours in ((2, 50), (0, 48), (5, 24), (-3, 72), (23, 26)):
            start = T0 + timedelta(hours=first_hour)
            whole = AllocationQuery(start, start + timedelta(hours=hours), hours, "namespace", show_idle=False,
                                    include_running=False)  # fmt: skip
            inputs = allocation_inputs(whole, now=whole.end)
            assert_same_totals(team_cost_path(replace(inputs, steps=False)).totals, record_path(inputs).totals)
        transaction.set_rollback(True)


@pytest.mark.django_db
def test_a_model_outside_the_catalogue_is_priced_by_the_fallback_on_every_path(world):
    jobs = bench_jobs(world)
    records = generated_records(jobs, [(0, UNCATALOGUED, "on-demand", 0, HOUR_US, 7000, None)])
    UsageRecord.objects.bulk_create(records)
    with metering_lock():
        rollup_add(records)
    query = AllocationQuery(T0, T0 + timedelta(hours=2), 1, "gpu_model", show_idle=False, include_running=False)
    inputs = allocation_inputs(query, now=query.end)
    assert record_path(inputs).totals[UNCATALOGUED].gpu_cost == Decimal("3.000000")  # the fallback price
    assert rollup_shared_idle_path(inputs).totals == record_path(inputs).totals
    # The invoice prices the same rollup rows per line in SQL: the fallback price there too.
    lines = invoice_lines(team=jobs[0].team, month=T0, now=T0 + timedelta(days=40))
    assert [(line.gpu_model, line.gpu_cost) for line in lines] == [(UNCATALOGUED, Decimal("3.000000"))]
