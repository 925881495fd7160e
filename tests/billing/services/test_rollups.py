"""Rollups (``billing.services.rollups``): exactly the sum of the records, rebuilt from them."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.db.models import Sum

from billing.models import UsageGroupHourly, UsageHourly, UsageRecord
from billing.services.metering import metering_run
from billing.services.rollups import group_rollup_rebuild, rollup_rebuild
from tests.billing.conftest import Run, rollup_totals, run_job, utc

T0 = utc(2026, 10, 5, 9, 30)


@pytest.mark.django_db
def test_the_rollup_is_exactly_the_sum_of_the_records(world):
    run_job(world, gpu=0, mig_profile="1g.10gb", replicas=3, runs=[Run(T0, T0 + timedelta(hours=26, seconds=13))])
    run_job(world, gpu=1, runs=[Run(T0 + timedelta(minutes=7), T0 + timedelta(hours=2, minutes=1))])
    metering_run()
    records = UsageRecord.objects.aggregate(gpu=Sum("gpu_usage"), cpu=Sum("cpu_milli_us"), mem=Sum("memory_mib_us"))
    totals = rollup_totals()
    assert (totals["gpu"], totals["cpu"], totals["mem"]) == (records["gpu"], records["cpu"], records["mem"])
    # 27 hours touched by the first; the second's 3 hours share their keys (same team, queue, model).
    assert UsageHourly.objects.count() == 27
    rebuilt_before = rollup_totals()
    rollup_rebuild()
    rebuilt = rollup_totals()
    assert rebuilt["util"] == pytest.approx(rebuilt_before.pop("util"))  # a float weight
    assert {k: v for k, v in rebuilt.items() if k != "util"} == rebuilt_before


def group_rows() -> list[tuple]:
    return list(
        UsageGroupHourly.objects.order_by("epoch_hour", "owner__username", "labels_text", "capacity_type").values_list(
            "epoch_hour", "owner__username", "labels_text", "gpu_model", "capacity_type", "gpu_usage", "cpu_milli_us"
        )
    )


@pytest.mark.django_db
def test_the_owner_and_label_rollup_is_the_runs_recomputed_hour_by_hour(world):
    # alice: 2 GPUs from 9:30 to 12:40, then on spot from 13:30 to 14:00 (another label set: its
    # capacity-type label); carol: 1 GPU x 3 replicas from 9:35 to 10:30:07.
    a = run_job(
        world, owner="alice", gpu=2, labels=(("project", "vision-a"),),
        runs=[Run(T0, T0 + timedelta(hours=3, minutes=10)),
              Run(T0 + timedelta(hours=4), T0 + timedelta(hours=4, minutes=30), capacity_type="spot")],
    )  # fmt: skip
    c = run_job(
        world,
        owner="carol",
        gpu=1,
        replicas=3,
        runs=[Run(T0 + timedelta(minutes=5), T0 + timedelta(hours=1, seconds=7))],
    )
    metering_run()
    hour0 = int(T0.timestamp()) // 3600  # 9:00
    minute = 60 * 10**6

    def expected(units: int, job, pieces: list[tuple[int, int]], ctype: str) -> list[tuple]:
        labels = {
            "capacity-type": ctype, "kind": job.kind, "owner": job.owner.username,
            "priority-class": job.priority_class.name, **job.labels,
        }  # fmt: skip
        text = json.dumps(labels, sort_keys=True, separators=(",", ":"))
        return [(hour0 + h, job.owner.username, text, "A100-80GB", ctype, units * us, job.cpu_milli * job.replicas * us)
                for h, us in pieces]  # fmt: skip

    alice = expected(
        14000, a.job, [(0, 30 * minute), (1, 60 * minute), (2, 60 * minute), (3, 40 * minute)], "on-demand"
    )
    alice_spot = expected(14000, a.job, [(4, 30 * minute)], "spot")
    carol = expected(21000, c.job, [(0, 25 * minute), (1, 30 * minute + 7 * 10**6)], "on-demand")
    assert group_rows() == sorted(alice + alice_spot + carol, key=lambda r: (r[0], r[1], r[2], r[4]))
    # Each row sums the same usage as the queue rollup and the records.
    records = UsageRecord.objects.aggregate(gpu=Sum("gpu_usage"))["gpu"]
    assert sum(r[5] for r in group_rows()) == records == rollup_totals()["gpu"]
    before = group_rows()
    rollup_rebuild()
    assert group_rows() == before
    group_rollup_rebuild()
    assert group_rows() == before
