"""``portal.prepared.Prepared``: a query compiled once answers as the ORM answers, for each of its users."""

from __future__ import annotations

from dataclasses import astuple
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.models import GpuAllocationHourly, PriceBookEntry
from billing.selectors.prices import gpu_model_names_used, price_list
from portal.jobs.models import GpuModel, JobAttempt
from portal.jobs.states import JobState
from portal.prepared import Prepared
from scheduling.models import CycleRun
from scheduling.selectors import _team_runs

pytestmark = pytest.mark.django_db


def test_the_price_list_is_the_price_books_rows_in_its_order(world):
    PriceBookEntry.objects.create(
        resource="gpu", gpu_model="T4", capacity_type="spot",
        effective_from=datetime(2026, 1, 1, tzinfo=UTC), usd_per_hour=Decimal("0.123456"),
    )  # fmt: skip
    columns = ("resource", "gpu_model", "capacity_type", "effective_from", "usd_per_hour")
    expected = [tuple(row) for row in PriceBookEntry.objects.values_list(*columns)]
    assert len(expected) > 1
    assert [astuple(price) for price in price_list()] == expected
    assert any(price.usd_per_hour == Decimal("0.123456") for price in price_list())  # a Decimal, exactly


def test_the_gpu_models_used_are_the_catalogues_the_price_books_and_those_with_usage_in_the_hours(world):
    GpuModel.objects.create(name="H100", memory_gib=80, mig_profiles=[])
    PriceBookEntry.objects.create(
        resource="gpu", gpu_model="L4", effective_from=timezone.now(), usd_per_hour=Decimal(1)
    )
    for hour, model in ((10, "V100"), (20, "P100"), (30, ""), (5, "K80")):
        GpuAllocationHourly.objects.create(epoch_hour=hour, gpu_model=model, capacity_type="on-demand", gpu_usage=1)
    catalogue = set(GpuModel.objects.values_list("name", flat=True))
    priced = set(PriceBookEntry.objects.exclude(gpu_model="").values_list("gpu_model", flat=True))
    assert {"H100", "L4"} <= catalogue | priced
    assert gpu_model_names_used(10, 30) == catalogue | priced | {"V100", "P100"}
    assert gpu_model_names_used(0, 10) == catalogue | priced | {"K80"}
    assert gpu_model_names_used(40, 50) == catalogue | priced


def test_the_last_cycle_key_follows_every_cycle(world):
    from scheduling.dry_run import _last_cycle_key

    assert _last_cycle_key()[0] is None
    first = CycleRun.objects.create(started_at=timezone.now(), duration_ms=0.0)
    assert _last_cycle_key()[0] == first.pk
    second = CycleRun.objects.create(started_at=timezone.now(), duration_ms=0.0)
    assert _last_cycle_key()[0] == second.pk


def test_a_teams_runs_are_the_orms_for_one_team_and_several(world):
    now = timezone.now()
    for n, team in enumerate(("vision", "nlp", "vision", "vision")):
        job = world.submit(team, gpu=1, runtime_s=600 * (n + 1))
        outcome = JobState.SUCCEEDED if n != 2 else JobState.FAILED
        JobAttempt.objects.create(
            job=job, number=1, queued_at=now, admitted_at=now, started_at=now - timedelta(hours=n + 1),
            ended_at=now - timedelta(minutes=n), outcome=outcome,
        )  # fmt: skip
    from scheduling.selectors import _TEAM_RUNS

    for team in ("vision", "nlp", "speech"):
        expected = list(_team_runs(outcome=JobState.SUCCEEDED, teams=[team]))
        assert _TEAM_RUNS.rows(outcome=JobState.SUCCEEDED, team=team) == expected
    assert len(_TEAM_RUNS.rows(outcome=JobState.SUCCEEDED, team="vision")) == 2


def test_a_parameter_that_is_no_stand_in_fails_loudly(world):
    query = Prepared(lambda pk: GpuModel.objects.filter(pk=pk, name="T4").values_list("name"), pk=-1)
    with pytest.raises(ValueError, match="no stand-in"):
        query.rows(pk=1)
    with pytest.raises(ValueError, match="distinct"):
        Prepared(lambda a, b: GpuModel.objects.filter(pk=a, memory_gib=b).values_list("name"), a=7, b=7)
