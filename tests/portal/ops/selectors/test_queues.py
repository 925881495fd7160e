"""The Queues page's selector against hand-built states; every figure worked out by hand."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from portal.jobs.models import Job, JobAttempt
from portal.ops.models import QueueSample
from portal.ops.selectors import queue_overview
from portal.ops.selectors.queues import percentile, sample_series, wait_percentiles
from tests.factories import build_world
from tests.portal.ops.placing import place

pytestmark = pytest.mark.django_db


@pytest.fixture
def small():
    """Cohort "research": cq-vision and cq-nlp with 2 A100 each. vision runs 2 + 0.25 GPUs (borrows
    0.25), nlp runs 0.5 + 1 (lends 0.25 of its 0.5 unused); vision waits for one more GPU."""
    world = build_world(nominal_a100=2)
    place(world.submit("vision", gpu=2), "a100-0", (0, 1))
    place(world.submit("vision", gpu=0, gpu_milli=250), "a100-0", (2,), milli=250)
    place(world.submit("nlp", gpu=0, gpu_milli=500), "a100-0", (2,), milli=500)
    place(world.submit("nlp", gpu=1), "a100-1", (0,))
    world.submit("vision", name="v-next", gpu=1)
    return world


def _gpu(overview, queue, model="A100-80GB", group="cluster_queues"):
    q = next(q for q in overview[group] if q["name"] == queue)
    return next(r for r in q["gpu_models"] if r["gpu_model"] == model), q


def test_quota_borrowing_lending_and_pending_per_queue_and_cohort(small):
    overview = queue_overview(user=small.users["admin"], now=timezone.now())
    vision, cq_vision = _gpu(overview, "cq-vision")
    nlp, cq_nlp = _gpu(overview, "cq-nlp")
    figures = ("nominal_gpus", "used_gpus", "borrowed_gpus", "lent_gpus")
    assert [vision[k] for k in figures] == [2, 2.25, 0.25, 0]
    assert [nlp[k] for k in figures] == [2, 1.5, 0, 0.25]
    assert (vision["pending_gpus"], nlp["pending_gpus"]) == (1, 0)
    cohort, _ = _gpu(overview, "research", group="cohorts")
    assert [cohort[k] for k in (*figures, "pending_gpus")] == [4, 3.75, 0.25, 0.25, 1]
    # Weighted DRF over the cohort's 4 A100 (CPU, 8 of 224 cores, is smaller): 2.25/4 and 1.5/4.
    assert (cq_vision["share"], cq_vision["dominant"]) == (0.5625, "gpu/A100-80GB")
    assert cq_nlp["share"] == 0.375
    local = {lq["team"]: lq for lq in overview["local_queues"]}
    assert local["vision"]["share"] == 1.125  # 2.25 of its ClusterQueue's 2 A100, weight 1
    # The world's T4 quotas (4 + 4) exceed its one 4-GPU node; A100 (2 + 2 of 16) does not.
    assert overview["warnings"] == ["Nominal quotas of T4 add up to 8 GPUs, more than the 4 the cluster has."]


def test_a_team_member_sees_other_teams_queues_and_heads_without_their_names(small):
    Job.objects.filter(name="v-next").update(
        queue_position=1, pending_reason={"kind": "quota", "message": "needs 1 A100-80GB GPU, 0 free in quota"}
    )
    small.submit("nlp", name="n-secret", gpu=1)
    overview = queue_overview(user=small.users["alice"], now=timezone.now())
    (head,) = overview["heads"]["cq-vision"]
    assert (head["name"], head["position"], head["reason"]) == ("v-next", 1, "needs 1 A100-80GB GPU, 0 free in quota")
    (other,) = overview["heads"]["cq-nlp"]
    assert (other["id"], other["name"]) == (None, "another team's job")
    assert other["reason"] == "not yet considered by a cycle"
    names = {lq["team"]: lq["name"] for lq in overview["local_queues"]}
    assert names == {"vision": "default", "nlp": ""}


def test_over_committed_quota_and_a_queue_over_its_quota_are_warned(world):
    # world: two queues with 8 A100 each = 16 = the 2 nodes' GPUs: no A100 warning; raise one to 9.
    t4 = "Nominal quotas of T4 add up to 8 GPUs, more than the 4 the cluster has."
    assert queue_overview(user=world.users["admin"], now=timezone.now())["warnings"] == [t4]
    world.cluster_queues["vision"].flavors.filter(gpu_model__name="A100-80GB").update(nominal_gpus=9)
    a100 = "Nominal quotas of A100-80GB add up to 17 GPUs, more than the 16 the cluster has."
    assert queue_overview(user=world.users["admin"], now=timezone.now())["warnings"] == [a100, t4]
    # A queue in no cohort using more than its (lowered) quota is warned too.
    world.cluster_queues["vision"].flavors.filter(gpu_model__name="A100-80GB").update(nominal_gpus=1)
    world.cluster_queues["vision"].__class__.objects.filter(name="cq-vision").update(cohort="")
    place(world.submit("vision", gpu=2), "a100-0", (0, 1))
    assert queue_overview(user=world.users["admin"], now=timezone.now())["warnings"][-1] == (
        "cq-vision uses 2 A100-80GB GPUs, more than its nominal quota of 1: nothing new is admitted there until "
        "use falls below it."
    )


def test_wait_percentiles_interpolate_between_ranks_per_window(world):
    now = timezone.now()
    waits_24h = [60, 120, 180, 240, 600]
    rows = [(1, w) for w in waits_24h] + [(72, 3600), (24 * 8, 99999)]  # (hours ago, wait s)
    for i, (hours_ago, wait) in enumerate(rows):
        job = world.submit("vision", name=f"w{i}")
        admitted = now - timedelta(hours=hours_ago)
        JobAttempt.objects.create(job=job, number=1, queued_at=admitted - timedelta(seconds=wait), admitted_at=admitted)
    waits = wait_percentiles(now=now)["cq-vision"]
    # 24 h: sorted [60,120,180,240,600]; P50 at rank 2 = 180; P90 at rank 3.6 = 240 + 0.6 * 360 = 456.
    assert waits["24h"] == {"admissions": 5, "p50_s": 180.0, "p90_s": 456.0}
    # 7 d adds 3600 (the 8-day-old one is out): P50 at rank 2.5 = 210; P90 at 4.5 = 600 + 0.5 * 3000 = 2100.
    assert waits["7d"] == {"admissions": 6, "p50_s": 210.0, "p90_s": 2100.0}
    assert "cq-nlp" not in wait_percentiles(now=now)
    assert percentile([60, 120, 180, 240, 600], 0.9) == pytest.approx(456.0)


def test_the_charts_read_the_first_sample_of_each_hour_and_the_latest(world):
    now = timezone.now().replace(minute=30, second=0, microsecond=0)
    hour = now.replace(minute=0)
    for minute, used in ((0, 1000), (10, 2000), (20, 3000)):
        QueueSample.objects.create(
            at=hour + timedelta(minutes=minute), cluster_queue="cq-vision", gpu_model="A100-80GB",
            nominal_milli=8000, used_milli=used, pending_milli=500,
        )  # fmt: skip
    QueueSample.objects.create(at=now - timedelta(days=8), cluster_queue="cq-vision", gpu_model="A100-80GB")
    series = sample_series(now=now)["cq-vision"]["A100-80GB"]
    # Samples every 5 minutes (the default interval): the one at minute 0 stands for the hour; the
    # latest (minute 20) ends the chart at the present; minute 10 is left out.
    at = [hour, hour + timedelta(minutes=20)]
    assert (series["at"], series["used"], series["nominal"], series["pending"]) == (
        at,
        [1.0, 3.0],
        [8.0] * 2,
        [0.5] * 2,
    )


def test_a_portal_sampled_for_less_than_an_hour_has_its_charts(world):
    """The first samples after install fall mid-hour: the charts show the latest rather than none
    (the page would say "No samples yet" with samples stored)."""
    now = timezone.now().replace(minute=40, second=0, microsecond=0)
    for minute in (27, 32):
        QueueSample.objects.create(
            at=now.replace(minute=minute), cluster_queue="cq-vision", gpu_model="A100-80GB",
            nominal_milli=8000, used_milli=1000 * minute, pending_milli=0,
        )  # fmt: skip
    series = sample_series(now=now)["cq-vision"]["A100-80GB"]
    assert (series["at"], series["used"]) == ([now.replace(minute=32)], [32.0])
