"""The what-if and cost pages in a real browser, at 1400 and 800 px: an admin replays a quota cut on
real history and reads both columns with their charts; a member reads the cost page with its budget,
forecast, charts and breakdowns. No chart or table leaves its card."""

from __future__ import annotations

import contextlib
import re

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from billing.services import price_book_seed_defaults
from portal.whatif.models import WhatIfRun
from tests.billing.conftest import over_a_hard_stop_budget
from tests.browser.conftest import OVERFLOW_JS, assert_nothing_overflows, login, screenshot
from tests.portal.whatif.test_views import busy_history

WIDTHS = (1400, 800)


def at_each_width(page, name, tmp_path, wait_for: str) -> None:
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.wait_for_selector(wait_for)
        # Plotly follows its card's width on a debounced resize: give the layout up to 5 s to settle.
        with contextlib.suppress(PlaywrightTimeout):  # the assertion below says what overflows
            page.wait_for_function(f"() => ({OVERFLOW_JS})().length === 0", timeout=5_000)
        assert_nothing_overflows(page)  # before the screenshot, whose full-page resize redraws charts
        screenshot(page, f"{name}-{width}", tmp_path)


@pytest.mark.django_db(transaction=True)
def test_an_admin_replays_a_quota_cut_and_reads_both_columns_side_by_side(page, world, tmp_path, settings):
    settings.SIM_SPEEDUP = 1.0
    busy_history(world)
    login(page, "admin")
    page.goto("/whatif/")
    at_each_width(page, "whatif-form", tmp_path, "form.whatif")
    page.select_option("select[name=days]", "1")
    page.fill("input[name='fq:cq-nlp:A100-80GB:nominal_gpus']", "2")
    page.fill("input[name='fq:cq-nlp:A100-80GB:borrowing_limit']", "0")
    page.click("form.whatif button[type=submit]")
    page.wait_for_selector("table.compare")  # the replay ran (eagerly) and the result page shows it
    run = WhatIfRun.objects.get()
    assert run.status == WhatIfRun.Status.DONE
    assert page.locator("#check strong").all_inner_texts() == ["0", "0"]  # admissions, preemptions differing
    assert page.locator("table.compare tr.whatif").count() == 2
    page.wait_for_selector(".js-plotly-plot .main-svg")
    assert page.locator(".js-plotly-plot").count() == 4
    at_each_width(page, "whatif-result", tmp_path, ".js-plotly-plot .main-svg")


@pytest.mark.django_db(transaction=True)
def test_the_cost_page_reads_right_at_both_widths(page, world, tmp_path, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    price_book_seed_defaults()  # a transactional test before this one flushed the migration's seed
    over_a_hard_stop_budget(world)
    login(page, "alice")
    page.goto("/cost/?window=7d")
    page.wait_for_selector("#by-user")  # the breakdown fragment came in
    assert page.locator("#this-month .fill-over").count() == 1
    assert page.locator(".reason", has_text="of the monthly GPU budget used").count() == 0
    at_each_width(page, "cost-member", tmp_path, ".js-plotly-plot .main-svg")
    page.context.clear_cookies()  # signed out
    login(page, "admin")
    page.goto("/cost/?window=7d")
    page.wait_for_selector("#by-quota")
    at_each_width(page, "cost-admin", tmp_path, ".js-plotly-plot .main-svg")


@pytest.mark.django_db(transaction=True)
def test_a_chart_in_a_row_of_cards_fits_its_card_without_any_resize_of_the_window(page, world, tmp_path):
    """The "by GPU model" charts sit two to a row. While the page was parsed the first card spanned the
    whole row (its neighbour did not exist yet), plotly drew its chart that wide, and the narrower card
    then clipped half of its bars: only a resize of the window redrew it. Nothing resizes here."""
    price_book_seed_defaults()  # a transactional test before this one flushed the migration's seed
    over_a_hard_stop_budget(world)
    login(page, "alice")
    page.goto("/cost/?window=7d")
    page.wait_for_selector(".grid.charts .js-plotly-plot .main-svg")
    # The redraw is asynchronous: allow it a moment, then the check below says what still overflows.
    with contextlib.suppress(PlaywrightTimeout):
        page.wait_for_function(f"() => ({OVERFLOW_JS})().length === 0", timeout=3_000)
    # Checked before the screenshot: a full-page screenshot resizes the window, which redraws the
    # charts and hid this bug from the other tests.
    assert_nothing_overflows(page)
    screenshot(page, "cost-first-paint", tmp_path)


@pytest.mark.django_db(transaction=True)
def test_a_weeks_charts_label_days_flat_and_keep_their_legends_off_them(page, world, tmp_path):
    """A week of daily steps: plotly's default labels were two lines (hour, then "Nov 23, 2026") and its
    default legend place sat on the second line. Ticks a day or more apart are now the day alone, never
    turned (``portal.chart_layout.TIME_AXIS``); the legend check runs at both widths
    (``assert_nothing_overflows``)."""
    from datetime import timedelta

    from django.utils import timezone

    from billing.services import metering_run
    from tests.billing.conftest import Run, run_job

    price_book_seed_defaults()  # a transactional test before this one flushed the migration's seed
    now = timezone.now()
    for days in range(1, 7):
        start = now - timedelta(days=days, hours=2)
        run_job(world, team=("vision", "nlp")[days % 2], gpu=1, runs=[Run(start, start + timedelta(hours=1))])
    metering_run()
    login(page, "admin")
    page.goto("/cost/?window=7d")
    page.wait_for_selector(".js-plotly-plot g.legend", state="attached")
    labels = page.evaluate(
        """() => [...document.querySelectorAll('.js-plotly-plot')]
            .filter(chart => chart._fullLayout.xaxis.type === 'date')
            .flatMap(chart => [...chart.querySelectorAll('g.xtick text')].map(t => t.textContent))"""
    )
    assert labels  # the time charts (the per-model and per-namespace bars are categories)
    odd = [label for label in labels if not re.fullmatch(r"[A-Z][a-z]{2} \d{1,2}", label)]
    assert odd == []
    at_each_width(page, "cost-week", tmp_path, ".js-plotly-plot .main-svg")
