"""The pages in a real browser: a member signs in and sees the job list and the dashboard's charts."""

from __future__ import annotations

import pytest

from scheduling.models import NodePool
from tests.browser.conftest import assert_nothing_overflows, login, screenshot


@pytest.mark.django_db(transaction=True)
def test_a_member_signs_in_and_the_dashboard_draws_its_charts_inside_their_cards(page, world, tmp_path):
    world.submit("vision", name="resnet", gpu=1)
    login(page, "alice")
    page.goto("/jobs/")
    assert page.get_by_text("resnet").count() >= 1
    page.goto("/dashboard/")
    page.wait_for_selector(".js-plotly-plot .main-svg")
    assert page.locator(".js-plotly-plot").count() >= 2
    assert_nothing_overflows(page)
    screenshot(page, "dashboard-1400", tmp_path)
    page.set_viewport_size({"width": 800, "height": 900})
    page.wait_for_timeout(300)
    assert_nothing_overflows(page)
    screenshot(page, "dashboard-800", tmp_path)


def test_the_overflow_check_catches_a_table_wider_than_its_card(browser):
    tab = browser.new_page(viewport={"width": 800, "height": 600})
    tab.set_content(
        "<div class='card' style='width:300px'><h2>Spend</h2>"
        "<table style='width:600px'><tr><td>wide</td></tr></table></div>"
    )
    with pytest.raises(AssertionError):
        assert_nothing_overflows(tab)
    tab.close()


AFFINITY = """nodeAffinity:
  requiredDuringSchedulingIgnoredDuringExecution:
    nodeSelectorTerms:
    - matchExpressions:
      - key: gpu-type
        operator: In
        values: [A100, H100]
"""


@pytest.mark.django_db(transaction=True)
def test_a_member_pastes_an_affinity_and_reads_why_the_job_waits_and_where_pools_are(page, world, tmp_path, settings):
    NodePool.objects.create(
        name="notebooks", node_selector={"karpenter.sh/capacity-type": "spot"}, overcommit_ratio=1.2
    )
    login(page, "alice")
    page.goto("/jobs/new/")
    page.fill("input[name=name]", "needs-h100")
    page.fill("textarea[name=affinity]", AFFINITY)
    page.select_option("select[name=required_topology]", "node")
    page.click("form.job button[type=submit]")
    page.wait_for_load_state("networkidle")
    # No node has gpu-type A100 or H100: the form says so on the field, and nothing is submitted.
    assert "/jobs/new/" in page.url
    assert page.get_by_text("not matching node affinity gpu-type In [A100, H100]").count() >= 1
    screenshot(page, "form-never-fits", tmp_path)
    settings.QUEUE_NEVER_FITTING_JOBS = True  # a cluster that autoscales: such a job queues
    page.fill("textarea[name=affinity]", AFFINITY)
    page.click("form.job button[type=submit]")
    page.wait_for_load_state("networkidle")
    assert "/jobs/new/" not in page.url, page.content()[:2000]
    page.goto(page.url)  # the cycle ran on submit: the reason is on the page now
    assert page.get_by_text("Node affinity (required)").count() == 1
    assert page.get_by_text("gpu-type In [A100, H100]").count() >= 1
    reason = page.locator(".reason").inner_text()
    assert "not matching node affinity gpu-type In [A100, H100]" in reason, reason
    assert_nothing_overflows(page)
    screenshot(page, "job-affinity", tmp_path)
    page.goto("/queues/")
    assert page.get_by_text("Node pools").count() == 1
    assert page.get_by_text("karpenter.sh/capacity-type=spot").count() == 1
    assert_nothing_overflows(page)
    screenshot(page, "queues-pools", tmp_path)
