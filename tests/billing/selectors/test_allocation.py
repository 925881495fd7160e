"""Cost allocation (``billing.selectors.allocation``) through the API: exact totals against an
independent recomputation, tenancy, idle, prices, aggregates, running jobs, the priced rollup."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from fractions import Fraction

import pytest

from billing.models import PriceBookEntry
from billing.services import capacity_record, metering_run
from tests.billing.conftest import (
    OCT_END,
    OCT_START,
    OCTOBER,
    History,
    Run,
    exact_gpu_hours,
    generated_month,
    get_json,
    rounded,
    run_job,
    utc,
)


@pytest.mark.django_db
def test_a_generated_month_matches_an_independent_recomputation_exactly(world, api):
    histories = generated_month(world)
    assert metering_run() > 80
    assert metering_run() == 0  # a second run changes nothing
    admin = api("admin")

    namespaces = exact_gpu_hours(histories, OCT_START, OCT_END, lambda h, r: h.job.team.namespace)
    body = get_json(admin, window=OCTOBER, aggregate="namespace", step="1d", idle="false")
    assert len(body["data"]) == 31
    assert {k: Decimal(v["gpuHours"]) for k, v in body["totals"].items()} == {
        k: rounded(v) for k, v in namespaces.items()
    }

    jobs = exact_gpu_hours(histories, OCT_START, OCT_END, lambda h, r: str(h.job.pk))
    by_job = get_json(admin, window=OCTOBER, aggregate="job", step="1d", idle="false")["totals"]
    assert {k: Decimal(v["gpuHours"]) for k, v in by_job.items() if v["gpuHours"]} == {
        k: rounded(v) for k, v in jobs.items() if v
    }

    # GPU cost: each interval at its model's and capacity type's seeded price.
    price = {
        (e.gpu_model, e.capacity_type): Fraction(e.usd_per_hour) for e in PriceBookEntry.objects.filter(resource="gpu")
    }
    models = exact_gpu_hours(histories, OCT_START, OCT_END, lambda h, r: (r.gpu_model, r.capacity_type))
    expected_cost = sum(hours * price[key] for key, hours in models.items() if hours)
    by_model = get_json(admin, window=OCTOBER, aggregate="gpu_model", idle="false")["totals"]
    assert sum(Decimal(v["gpuCost"]) for v in by_model.values()) == pytest.approx(
        rounded(expected_cost), abs=Decimal("0.00001")
    )
    by_team = get_json(admin, window=OCTOBER, aggregate="team", idle="false")["totals"]
    expected_team_cost = {}
    for h in histories:
        for r in h.runs:
            lo, hi = max(r.start, OCT_START), min(r.end, OCT_END)
            if lo < hi:
                micros = (hi - lo) // timedelta(microseconds=1)
                hours = Fraction(micros, 3_600_000_000) * _share(h) * h.job.replicas
                slug = h.job.team.slug
                expected_team_cost[slug] = (
                    expected_team_cost.get(slug, 0) + hours * price[(r.gpu_model, r.capacity_type)]
                )
    assert {k: Decimal(v["gpuCost"]) for k, v in by_team.items()} == {
        k: rounded(v) for k, v in expected_team_cost.items()
    }


def _share(history: History) -> Fraction:
    from tests.billing.conftest import share_of

    return share_of(history.job)


@pytest.mark.django_db
def test_tenants_see_only_their_own_teams_and_admins_see_all(world, api):
    run_job(world, team="vision", gpu=1, runs=[Run(utc(2026, 10, 3), utc(2026, 10, 3, 2))])
    run_job(world, team="nlp", gpu=2, runs=[Run(utc(2026, 10, 3), utc(2026, 10, 3, 1))])
    metering_run()
    assert set(get_json(api("alice"), window=OCTOBER)["totals"]) == {"team-vision"}
    assert set(get_json(api("bob"), window=OCTOBER)["totals"]) == {"team-nlp"}
    assert set(get_json(api("carol"), window=OCTOBER)["totals"]) == {"team-vision", "team-nlp"}
    admin = get_json(api("admin"), window=OCTOBER, idle="false")["totals"]
    assert {k: Decimal(v["gpuHours"]) for k, v in admin.items()} == {"team-vision": 2, "team-nlp": 2}
    # A tenant's job aggregate leaks no other team's jobs either.
    assert len(get_json(api("bob"), window=OCTOBER, aggregate="job")["totals"]) == 1


@pytest.mark.django_db
def test_idle_is_capacity_not_allocated_shown_or_shared(world, api):
    # Recorded capacity: 16 A100 on-demand and 4 T4 spot from Oct 1st on (the world's simulated nodes).
    from scheduling.adapters.simulated import SimulatedCluster

    capacity_record(now=OCT_START, backend=SimulatedCluster())
    run_job(world, team="vision", gpu=4, runs=[Run(utc(2026, 10, 2, 10), utc(2026, 10, 2, 12))])
    run_job(world, team="nlp", gpu=4, runs=[Run(utc(2026, 10, 2, 10), utc(2026, 10, 2, 11))])
    metering_run()
    window = "2026-10-02T10:00:00Z,2026-10-02T12:00:00Z"
    body = get_json(api("admin"), window=window, step="1h", idle="true")
    idle = body["totals"]["__idle__"]
    # A100: 16 × 2 h − (8 + 4) = 20 GPU-hours idle; T4: 4 × 2 = 8.
    assert Decimal(idle["gpuHours"]) == 28
    a100 = PriceBookEntry.objects.get(resource="gpu", gpu_model="A100-80GB", capacity_type="on-demand").usd_per_hour
    t4 = PriceBookEntry.objects.get(resource="gpu", gpu_model="T4", capacity_type="spot").usd_per_hour
    assert Decimal(idle["gpuCost"]) == 20 * a100 + 8 * t4
    assert {k: Decimal(v["gpuHours"]) for k, v in body["idleByGpuModel"].items()} == {"A100-80GB": 20, "T4": 8}
    first_hour = body["data"][0]["__idle__"]
    assert Decimal(first_hour["gpuHours"]) == 8 + 4  # 16 − 8 A100 + 4 T4

    shared = get_json(api("admin"), window=window, step="1h", shareIdle="true")["totals"]
    assert "__idle__" not in shared
    # Hour 1: 8 idle A100 shared 4:4; hour 2: 12 idle A100 all to vision. T4 idle has no users to share it.
    assert Decimal(shared["team-vision"]["sharedIdleCost"]) == (4 + 12) * a100
    assert Decimal(shared["team-nlp"]["sharedIdleCost"]) == 4 * a100
    vision = shared["team-vision"]
    assert Decimal(vision["totalCost"]) == Decimal(vision["gpuCost"]) + Decimal(vision["cpuCost"]) + Decimal(
        vision["ramCost"]
    ) + Decimal(vision["sharedIdleCost"])
    # Tenants never see the cluster's idle capacity.
    tenant = get_json(api("alice"), window=window, idle="true")
    assert "__idle__" not in tenant["totals"]
    assert "idleByGpuModel" not in tenant


@pytest.mark.django_db
def test_a_price_change_never_rewrites_the_past(world, api):
    run_job(world, gpu=1, runs=[Run(utc(2026, 10, 2), utc(2026, 10, 2, 10))])
    metering_run()
    window = "2026-10-01T00:00:00Z,2026-10-03T00:00:00Z"
    before = get_json(api("admin"), window=window, idle="false")["totals"]["team-vision"]["gpuCost"]
    PriceBookEntry.objects.create(
        resource="gpu", gpu_model="A100-80GB", capacity_type="on-demand",
        effective_from=utc(2026, 10, 2, 5), usd_per_hour=Decimal("100"),
    )  # fmt: skip
    after = get_json(api("admin"), window=window, idle="false")["totals"]["team-vision"]["gpuCost"]
    old = PriceBookEntry.objects.filter(gpu_model="A100-80GB", capacity_type="on-demand").order_by("effective_from")[0]
    assert Decimal(before) == 10 * old.usd_per_hour
    assert Decimal(after) == 5 * old.usd_per_hour + 5 * 100  # the new price from 05:00 only


@pytest.mark.django_db
def test_label_queue_and_capacity_type_aggregates(world, api):
    run_job(world, gpu=1, runs=[Run(utc(2026, 10, 2), utc(2026, 10, 2, 1), "A100-80GB", "spot")])
    metering_run()
    admin = api("admin")
    assert set(get_json(admin, window=OCTOBER, aggregate="label:owner", idle="false")["totals"]) == {"alice"}
    assert set(get_json(admin, window=OCTOBER, aggregate="label:missing", idle="false")["totals"]) == {
        "__unallocated__"
    }
    assert set(get_json(admin, window=OCTOBER, aggregate="queue", idle="false")["totals"]) == {"team-vision/default"}
    assert set(get_json(admin, window=OCTOBER, aggregate="capacity_type", idle="false")["totals"]) == {"spot"}


@pytest.mark.django_db
def test_running_jobs_count_up_to_now(world, api):
    from django.utils import timezone

    now = timezone.now()
    run_job(world, gpu=2, runs=[Run(now - timedelta(hours=3), None)])
    body = get_json(api("alice"), window="1d", idle="false")
    hours = Decimal(body["totals"]["team-vision"]["gpuHours"])
    assert Decimal(6) <= hours < Decimal("6.01")


@pytest.mark.django_db
def test_a_member_counts_the_running_jobs_of_their_teams_only_with_or_without_shared_idle(world, api):
    from django.utils import timezone

    now = timezone.now()
    run_job(world, gpu=2, runs=[Run(now - timedelta(hours=3), None)])  # vision: 6 GPU-hours so far
    run_job(world, team="nlp", gpu=4, runs=[Run(now - timedelta(hours=2), None)])  # nlp: 8
    for params in ({"idle": "false"}, {"shareIdle": "true"}):
        totals = get_json(api("alice"), window="1d", **params)["totals"]
        assert "team-nlp" not in totals
        assert "__idle__" not in totals
        assert Decimal(6) <= Decimal(totals["team-vision"]["gpuHours"]) < Decimal("6.01")
    everyone = get_json(api("admin"), window="1d", idle="false")["totals"]
    assert Decimal(8) <= Decimal(everyone["team-nlp"]["gpuHours"]) < Decimal("8.01")
    assert Decimal(6) <= Decimal(everyone["team-vision"]["gpuHours"]) < Decimal("6.01")


@pytest.mark.django_db
def test_the_priced_team_rollup_and_pricing_at_query_time_agree_and_a_new_price_reprices(world, api):
    from billing.models import CostRollupState
    from billing.selectors.prices import cost_rollup_current

    generated_month(world, seed=11)
    metering_run()
    assert cost_rollup_current()
    admin = api("admin")
    params = {"window": OCTOBER, "aggregate": "namespace", "step": "1d", "idle": "false"}
    from_rollup = get_json(admin, **params)
    CostRollupState.objects.all().delete()  # stale: the query prices the hourly usage itself
    assert not cost_rollup_current()
    at_query_time = get_json(admin, **params)
    assert from_rollup["totals"] == at_query_time["totals"]
    for day_rollup, day_query in zip(from_rollup["data"], at_query_time["data"], strict=True):
        assert day_rollup.keys() == day_query.keys()
        for name, figures in day_rollup.items():
            assert float(figures["totalCost"]) == pytest.approx(float(day_query[name]["totalCost"]), rel=1e-9)

    metering_run()  # nothing new to meter, but the rollup is re-priced
    assert cost_rollup_current()
    PriceBookEntry.objects.create(
        resource="gpu", gpu_model="A100-80GB", capacity_type="spot",
        effective_from=utc(2026, 10, 15), usd_per_hour=Decimal("9.99"),
    )  # fmt: skip
    assert not cost_rollup_current()
    changed = get_json(admin, **params)["totals"]
    metering_run()
    assert cost_rollup_current()
    assert get_json(admin, **params)["totals"] == changed
    assert changed != from_rollup["totals"]
