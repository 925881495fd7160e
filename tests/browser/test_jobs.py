"""Job pages in a real browser: a job runs to Succeeded while its page updates itself (state and cost
appear without a reload), a requeued job's attempts, and cancelling with a confirmation step, with
and without JavaScript."""

from __future__ import annotations

import re
import time

import pytest
from django.db import transaction
from django.utils import timezone
from playwright.sync_api import expect

from scheduling import services
from scheduling.adapters import apply
from scheduling.adapters.simulated import SimulatedCluster
from scheduling.engine.model import Preemption
from tests.browser.conftest import PASSWORDS, assert_nothing_overflows, login, screenshot

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def fast(settings):
    settings.LIVE_REFRESH_S = 0.5
    settings.SIM_SPEEDUP = 60.0
    return SimulatedCluster(speedup=60.0)


def test_a_job_runs_to_succeeded_and_its_cost_appears_without_a_reload(page, world, fast, tmp_path):
    job = world.submit("vision", name="watch-me", gpu=2, runtime_s=120)  # 2 s on the simulated cluster
    login(page, "alice")
    page.goto(f"/jobs/{job.pk}/")
    page.evaluate("window.__notReloaded = true")
    expect(page.locator("#job-state")).to_have_text("Pending")
    services.cycle_run(now=timezone.now(), backend=fast)  # admitted; its pods run from admission
    services.cluster_sync(backend=fast, now=timezone.now())
    expect(page.locator("#job-state")).to_have_text("Running")
    expect(page.locator("li.attempt.current")).to_contain_text("A100-80GB")
    screenshot(page, "job-running", tmp_path)
    time.sleep(2.1)
    services.cluster_sync(backend=fast, now=timezone.now())
    expect(page.locator("#job-state")).to_have_text("Succeeded")
    cost = page.locator("#job-cost")
    expect(cost).to_have_text(re.compile(r"^\$0\.0\d{3} "))
    assert cost.inner_text() != "$0.0000"
    expect(page.locator("#job-gpu-hours")).to_have_text("0.0011")  # 2 GPUs for 2 s
    assert page.evaluate("window.__notReloaded") is True
    assert_nothing_overflows(page)
    screenshot(page, "job-succeeded", tmp_path)
    # The list shows the finished job's figures too, and refreshes in place.
    page.goto("/jobs/")
    page.evaluate("window.__notReloaded = true")
    row = page.locator(f'tr[data-job="{job.pk}"]')
    expect(row.locator("td.cost")).to_have_text(re.compile(r"^\$0\.0\d{3}$"))
    other = world.submit("vision", name="arrives-later")
    expect(page.locator(f'tr[data-job="{other.pk}"]')).to_be_visible()
    assert page.evaluate("window.__notReloaded") is True
    assert_nothing_overflows(page)
    screenshot(page, "job-list", tmp_path)


def test_a_requeued_jobs_page_shows_each_attempt_and_what_it_does_now(page, world, fast, tmp_path):
    job = world.submit("vision", name="requeued", gpu=1, runtime_s=3600)
    services.cycle_run(now=timezone.now(), backend=fast)
    services.cluster_sync(backend=fast, now=timezone.now())
    with transaction.atomic():
        apply.preemption_apply(
            Preemption(str(job.pk), "", "preempted by job 9 (critical)"), now=timezone.now(), backend=fast
        )
    login(page, "alice")
    page.goto(f"/jobs/{job.pk}/")
    expect(page.locator("#job-state")).to_have_text("Pending")
    expect(page.locator("li.attempt")).to_have_count(1)
    expect(page.locator("li.attempt")).to_contain_text("→ requeued")
    expect(page.locator(".reason")).to_contain_text("waiting again since")
    services.cycle_run(now=timezone.now(), backend=fast)  # admitted again, live on the open page
    expect(page.locator("li.attempt")).to_have_count(2)
    expect(page.locator("#job-state")).to_have_text(re.compile("Admitted|Running"))
    assert_nothing_overflows(page)
    screenshot(page, "job-requeued", tmp_path)


def _cancel_flow(tab, job):
    tab.goto(f"/jobs/{job.pk}/")
    tab.get_by_role("link", name="Cancel job…").click()
    expect(tab.locator("h1")).to_have_text(f"Cancel job {job.pk} · {job.name}?")
    tab.get_by_role("link", name="No, keep it").click()
    expect(tab.locator("#job-state")).to_have_text("Pending")
    tab.get_by_role("link", name="Cancel job…").click()
    tab.get_by_role("button", name=f"Yes, cancel job {job.pk}").click()
    expect(tab.locator("#job-state")).to_have_text("Cancelled")
    expect(tab.locator(".messages")).to_contain_text(f"Job {job.pk} cancelled.")
    expect(tab.get_by_role("link", name="Cancel job…")).to_have_count(0)


def test_cancel_asks_for_confirmation(page, world, tmp_path):
    job = world.submit("vision", name="to-cancel")
    login(page, "alice")
    page.goto(f"/jobs/{job.pk}/cancel/")
    screenshot(page, "cancel-confirmation", tmp_path)
    _cancel_flow(page, job)
    job.refresh_from_db()
    assert job.state == "Cancelled"


def test_cancel_with_confirmation_works_without_javascript(browser, live_server, world):
    job = world.submit("vision", name="no-js")
    context = browser.new_context(base_url=live_server.url, java_script_enabled=False)
    tab = context.new_page()
    tab.goto("/accounts/login/")
    tab.fill("input[name=username]", "alice")
    tab.fill("input[name=password]", PASSWORDS["alice"])
    tab.click("button[type=submit], input[type=submit]")
    _cancel_flow(tab, job)
    context.close()
    job.refresh_from_db()
    assert job.state == "Cancelled"
