"""The Cluster and Queues pages in a real browser, at 1400 and 800 px: nothing spills out of its card."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from portal.jobs.models import Job
from portal.ops.models import QueueSample
from scheduling.models import SimNode
from tests.browser.conftest import assert_nothing_overflows, login, screenshot
from tests.portal.ops.placing import place


@pytest.fixture
def busy(world):
    SimNode.objects.filter(name="a100-1").update(
        unschedulable=True, labels={"topology.kubernetes.io/rack": "r2", "karpenter.sh/capacity-type": "on-demand"}
    )
    SimNode.objects.filter(name="a100-0").update(labels={"topology.kubernetes.io/rack": "r1"})
    SimNode.objects.create(
        name="a100-mig-0", gpu_model=world.models["A100-80GB"], gpu_count=2, cpu_milli=64_000,
        memory_mib=512 * 1024, mig_enabled=True, labels={"topology.kubernetes.io/rack": "r1"},
    )  # fmt: skip
    place(world.submit("vision", name="resnet-train", gpu=2), "a100-0", (0, 1))
    place(world.submit("vision", name="notebook", gpu=0, gpu_milli=250), "a100-0", (2,), milli=250)
    place(world.submit("nlp", name="nlp-llm", gpu=0, gpu_milli=500), "a100-0", (2,), milli=500)
    place(world.submit("nlp", name="nlp-eval", gpu=1), "a100-1", (3,))
    place(world.submit("vision", name="mig-inference", gpu=0, mig_profile="3g.40gb"), "a100-mig-0", (0,),
          milli=0, mig="3g.40gb", slot=4)  # fmt: skip
    waiting = world.submit("vision", name="big-pretrain", gpu=8)
    Job.objects.filter(pk=waiting.pk).update(
        queue_position=1, pending_reason={"kind": "quota", "message": "needs 8 A100-80GB GPUs, 5.75 free in quota"}
    )
    world.submit("nlp", name="nlp-queued", gpu=2)
    now = timezone.now().replace(minute=0, second=0, microsecond=0)  # the charts plot each hour's first sample
    for hour in range(48):
        for cq, used in (("cq-vision", 2000 + 100 * (hour % 12)), ("cq-nlp", 1500)):
            QueueSample.objects.create(
                at=now - timedelta(hours=hour), cluster_queue=cq, gpu_model="A100-80GB",
                nominal_milli=8000, used_milli=used, pending_milli=1000 * (hour % 5),
            )  # fmt: skip


def _both_widths(page, name: str, tmp_path) -> None:
    assert_nothing_overflows(page)  # before the screenshot, whose full-page resize redraws charts
    screenshot(page, f"{name}-1400", tmp_path)
    page.set_viewport_size({"width": 800, "height": 900})
    page.wait_for_timeout(400)
    assert_nothing_overflows(page)
    screenshot(page, f"{name}-800", tmp_path)


@pytest.mark.django_db(transaction=True)
def test_the_cluster_page_draws_every_gpu_and_filters_and_clicks_through_to_a_node(page, world, busy, tmp_path):
    login(page, "alice")
    page.goto("/cluster/")
    assert page.locator(".nodes .gpu").count() == 8 + 8 + 2 + 4
    assert page.get_by_text("nlp-llm").count() == 0  # bob's team's job: counted, not named
    _both_widths(page, "cluster", tmp_path)
    page.set_viewport_size({"width": 1400, "height": 900})
    page.select_option("select[name=state]", "cordoned")
    page.click("form.filters button[type=submit]")
    page.wait_for_load_state("networkidle")
    assert page.locator(".nodes .node").count() == 1
    page.click("text=a100-1")
    page.wait_for_load_state("networkidle")
    assert page.get_by_text("and 1 job of other teams").count() == 1


@pytest.mark.django_db(transaction=True)
def test_the_queues_page_shows_standings_heads_and_charts_inside_their_cards(page, world, busy, tmp_path):
    login(page, "alice")
    page.goto("/queues/")
    page.wait_for_selector(".js-plotly-plot .main-svg")
    assert page.locator(".js-plotly-plot").count() == 2
    assert page.get_by_text("needs 8 A100-80GB GPUs, 5.75 free in quota").count() == 1
    _both_widths(page, "queues", tmp_path)
    page.click("text=how it is computed")
    page.wait_for_load_state("networkidle")
    assert page.get_by_text("share(u, P, w)").count() >= 1


@pytest.mark.django_db(transaction=True)
def test_a_queue_chart_of_one_sample_never_writes_one_time_twice_on_its_axis(page, world, tmp_path):
    """A new portal's first sample: plotly spans the one point a few seconds each way, and ticks
    written to the minute read "21:26" four times over (``portal.chart_layout.time_axis``)."""
    QueueSample.objects.create(
        at=timezone.now(), cluster_queue="cq-vision", gpu_model="A100-80GB", nominal_milli=8000, used_milli=2000,
        pending_milli=1000,
    )  # fmt: skip
    login(page, "alice")
    page.goto("/queues/")
    page.wait_for_selector(".js-plotly-plot g.xtick text", state="attached")
    labels = page.evaluate(
        """() => [...document.querySelectorAll('.js-plotly-plot')]
            .flatMap(chart => [...chart.querySelectorAll('g.xtick text')].map(t => t.textContent))"""
    )
    assert len(labels) >= 2
    assert len(set(labels)) == len(labels), labels
    _both_widths(page, "queues-one-sample", tmp_path)
