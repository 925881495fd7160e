"""The submit form's live dry run in a real browser: the answer changes as the user edits the form,
without a reload, and its cost is price × GPU-hours recomputed from the price book."""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction

import pytest
from playwright.sync_api import expect

from billing.models import PriceBookEntry
from billing.services import price_book_seed_defaults
from portal.jobs.models import Job
from scheduling.dry_run import dry_run_forget
from tests.browser.conftest import assert_nothing_overflows, login, screenshot

pytestmark = pytest.mark.django_db(transaction=True)

SPEEDUP = 60.0


@pytest.fixture
def priced(settings):
    settings.SIM_SPEEDUP = SPEEDUP
    settings.CLUSTER_BACKEND = "simulated"
    price_book_seed_defaults()
    dry_run_forget()
    yield
    dry_run_forget()


def test_the_submit_form_shows_the_dry_run_live_as_the_user_edits(page, world, priced, tmp_path):
    login(page, "alice")
    page.goto("/jobs/new/")
    page.evaluate("window.notReloaded = true")
    verdict = page.locator("#check-verdict")
    # The form's defaults (1 whole GPU, 1 h requested) run now on an empty cluster.
    expect(verdict).to_have_attribute("data-verdict", "runs_now")
    page.check("input[name=allowed_gpu_models][value='A100-80GB']")
    page.fill("input[name=runtime_s]", "7200")
    expect(page.locator("#check-cost")).to_contain_text("A100-80GB")
    # 1 GPU for 7200 s of requested time = 120 s on the simulated cluster = 1/30 GPU-hour.
    price = Fraction(
        PriceBookEntry.objects.get(resource="gpu", gpu_model="A100-80GB", capacity_type="on-demand").usd_per_hour
    )
    gpu_usd = Decimal(price.numerator) / Decimal(price.denominator) / 30
    expect(page.locator("#check-cost")).to_contain_text(
        f"${gpu_usd.quantize(Decimal('0.000001'), ROUND_HALF_EVEN)} GPU"
    )
    expect(page.locator("#check-cost")).to_contain_text("0.033333 GPU-hours")
    screenshot(page, "check-runs-now", tmp_path)

    # 16 GPUs on one node: the world's A100 nodes have 8. The answer turns to never, live.
    page.fill("input[name=gpu]", "16")
    expect(verdict).to_have_attribute("data-verdict", "never")
    expect(page.locator("#check-reason")).to_contain_text("the largest A100-80GB node has 8")
    screenshot(page, "check-never", tmp_path)

    # A mistake in the form is named on the check, with the form's own label.
    page.fill("input[name=gpu]", "1")
    page.fill("input[name=gpu_milli]", "250")
    expect(page.locator("#check-errors")).to_contain_text("GPU fraction (milli-GPU)")
    page.fill("input[name=gpu_milli]", "0")
    expect(verdict).to_have_attribute("data-verdict", "runs_now")
    assert page.evaluate("window.notReloaded") is True  # every answer came without a page load
    assert Job.objects.count() == 0  # checks submit nothing
    assert_nothing_overflows(page)

    page.click("form.job button[type=submit]")
    page.wait_for_load_state("networkidle")
    assert "/jobs/new/" not in page.url
    assert Job.objects.count() == 1
