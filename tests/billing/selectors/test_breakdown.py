"""The cost page's breakdowns (``billing.selectors.breakdown``) against the rule: cost = price x
GPU-hours, GPU-hours = GPUs x run time inside the window."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from decimal import Decimal
from fractions import Fraction

import pytest

from billing.core.allocation import AllocationQuery
from billing.models import PriceBookEntry
from billing.selectors import cost_allocation
from billing.selectors.allocation import cost_totals
from billing.selectors.breakdown import cost_by_quota_use, cost_by_user_and_label
from billing.services import metering_run
from portal.jobs.models import JobAttempt
from tests.billing.conftest import Run, run_job, utc

pytestmark = pytest.mark.django_db

START, END = utc(2026, 10, 1), utc(2026, 10, 8)
NOW = utc(2026, 10, 20)


def gpu_price(model="A100-80GB", capacity_type="on-demand") -> Fraction:
    entry = PriceBookEntry.objects.get(resource="gpu", gpu_model=model, capacity_type=capacity_type)
    return Fraction(entry.usd_per_hour)


def as_fraction(value: Decimal) -> Fraction:
    return Fraction(value)


def world_with_labels_and_borrowing(world):
    # alice: 2 GPUs x 3 h, project=vision-a; carol: 1 GPU x 2 h (half before the window), no label;
    # bob (nlp): 4 GPUs x 1 h borrowed, project=nlp-x.
    a = run_job(
        world,
        owner="alice",
        gpu=2,
        labels=(("project", "vision-a"),),
        runs=[Run(utc(2026, 10, 2), utc(2026, 10, 2, 3))],
    )
    run_job(world, owner="carol", gpu=1, runs=[Run(utc(2026, 9, 30, 23), utc(2026, 10, 1, 1))])
    b = run_job(
        world, team="nlp", gpu=4, labels=(("project", "nlp-x"),), runs=[Run(utc(2026, 10, 3), utc(2026, 10, 3, 1))]
    )
    JobAttempt.objects.filter(job=b.job).update(borrowed=True)
    metering_run()
    return a, b


def query(**kw):
    return AllocationQuery(start=START, end=END, step_hours=24, **kw)


def test_cost_by_user_and_by_label_follow_the_rule_and_add_up_to_the_namespace_totals(world):
    world_with_labels_and_borrowing(world)
    p = gpu_price()
    both = cost_by_user_and_label(query(), key="project", now=NOW)
    by_user = {g.name: g for g in both.by_user}
    assert by_user["alice"].gpu_hours == 6
    assert by_user["carol"].gpu_hours == 1  # the hour inside the window
    assert by_user["bob"].gpu_hours == 4
    for name, gpu_hours in (("alice", 6), ("carol", 1), ("bob", 4)):
        cpu_and_ram = by_user[name].total_cost - as_decimal(gpu_hours * p)
        assert cpu_and_ram >= 0  # total = GPU cost (the rule) + CPU and memory
    namespaces = cost_allocation(query(), now=NOW).group_totals()
    assert sum(g.total_cost for g in by_user.values()) == pytest.approx(
        sum(f.total_cost for f in namespaces.values()), abs=Decimal("0.00001")
    )
    keys = both.label_keys
    assert keys[0] == "project"  # the jobs' own label before the ones metering adds
    assert set(keys[1:]) == {"kind", "priority-class", "owner", "capacity-type"}
    assert both.label == "project"
    by_label = {g.name: g for g in both.by_label}
    assert by_label["vision-a"].gpu_hours == 6
    assert by_label["nlp-x"].gpu_hours == 4
    assert by_label["__unallocated__"].gpu_hours == 1


def label_keys(q: AllocationQuery) -> list[str]:
    return cost_by_user_and_label(q, now=NOW).label_keys


def as_decimal(value: Fraction) -> Decimal:
    return (Decimal(value.numerator) / Decimal(value.denominator)).quantize(Decimal("0.000001"))


def test_cost_is_split_into_guaranteed_and_borrowed_use(world):
    world_with_labels_and_borrowing(world)
    p = gpu_price()
    rows = {q.team: q for q in cost_by_quota_use(start=START, end=END, now=NOW, team_ids=None)}
    assert rows["vision"].guaranteed_gpu_hours == 7
    assert rows["vision"].guaranteed_cost == as_decimal(7 * p)
    assert rows["vision"].borrowed_gpu_hours == 0
    assert rows["nlp"].borrowed_gpu_hours == 4
    assert rows["nlp"].borrowed_cost == as_decimal(4 * p)
    assert rows["nlp"].guaranteed_cost == 0


def test_a_tenant_sees_only_its_own_teams_keys_and_use(world):
    world_with_labels_and_borrowing(world)
    vision = [world.teams["vision"].pk]
    assert label_keys(query(team_ids=frozenset(vision)))[0] == "project"
    assert [q.team for q in cost_by_quota_use(start=START, end=END, now=NOW, team_ids=vision)] == ["vision"]
    assert label_keys(query(team_ids=frozenset())) == []
    later = AllocationQuery(start=END + timedelta(days=30), end=END + timedelta(days=31), step_hours=24)
    assert label_keys(later) == []


def test_guaranteed_and_borrowed_cost_follow_price_changes_the_window_and_running_attempts(world):
    # vision: 1 GPU from 9:30 to 13:30 on Oct 2, the price changing at 11:20 (from the 11:00 hour on);
    # nlp (borrowed): 2 GPUs still running from Oct 7 22:00, cut at the window's end (Oct 8 00:00).
    before = gpu_price()
    PriceBookEntry.objects.create(
        resource="gpu", gpu_model="A100-80GB", capacity_type="on-demand",
        effective_from=utc(2026, 10, 2, 11, 20), usd_per_hour=Decimal("7.250000"),
    )  # fmt: skip
    run_job(world, gpu=1, runs=[Run(utc(2026, 10, 2, 9, 30), utc(2026, 10, 2, 13, 30))])
    b = run_job(world, team="nlp", gpu=2, runs=[Run(utc(2026, 10, 7, 22), None)])
    JobAttempt.objects.filter(job=b.job).update(borrowed=True)
    rows = {q.team: q for q in cost_by_quota_use(start=START, end=END, now=NOW, team_ids=None)}
    assert rows["vision"].guaranteed_gpu_hours == 4
    assert rows["vision"].guaranteed_cost == as_decimal(Fraction(3, 2) * before + Fraction(5, 2) * Fraction("7.25"))
    assert rows["nlp"].borrowed_gpu_hours == 4  # 2 GPUs x the 2 hours inside the window
    assert rows["nlp"].borrowed_cost == as_decimal(4 * Fraction("7.25"))  # the new price holds on
    assert rows["nlp"].guaranteed_gpu_hours == 0


def test_one_read_answers_by_user_by_label_and_the_keys_as_the_allocation_api_does(world):
    world_with_labels_and_borrowing(world)
    both = cost_by_user_and_label(query(), key="no-such-key", now=NOW)
    assert both.label == "project"  # a key the window lacks falls back to the first one
    assert both.label_keys == ["project", "capacity-type", "kind", "owner", "priority-class"]
    for aggregate, groups in (("owner", both.by_user), ("label:project", both.by_label)):
        api = cost_totals(replace(query(), aggregate=aggregate), now=NOW)  # /api/v1/cost/allocation's totals
        assert {g.name: (g.gpu_hours, g.total_cost) for g in groups} == {
            name: (f.gpu_hours, f.total_cost) for name, f in api.items()
        }
    kind = {g.name: g.gpu_hours for g in cost_by_user_and_label(query(), key="kind", now=NOW).by_label}
    assert sum(kind.values()) == 11  # every GPU-hour of the window once: 6 + 1 + 4
