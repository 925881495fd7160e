"""Browser tests: Playwright for Python driving Debian's ``chromium`` (installed by ``make test`` from
``apt-packages.txt``; Playwright's own browser download is never used).

``page`` is a fresh browser tab on a live server (pytest-django's ``live_server``, a real HTTP server in
a thread over the test database); ``login(page, "alice")`` signs in through the login form;
``screenshot(page, name)`` saves a PNG under ``SCREENSHOT_DIR`` (default: the test's tmp dir) for a
person to look at, and ``assert_nothing_overflows(page)`` fails when a chart or table spills out of the
card that holds it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

# Playwright's sync API runs an event loop in this thread; Django refuses ORM calls from a thread with
# a running loop unless told the calls are safe (they are: the loop only drives the browser).
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
# Flags for a closed network and a root user (see the machine notes): no sandbox, no background traffic.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PASSWORDS = {"alice": "pw-alice", "bob": "pw-bob", "carol": "pw-carol", "admin": "pw-admin"}


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no chromium at {CHROMIUM}: `make test` installs Debian's chromium (apt-packages.txt)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Browser, live_server) -> Iterator[Page]:
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1400, "height": 900})
    tab = context.new_page()
    tab.set_default_timeout(15_000)
    yield tab
    context.close()


def login(page: Page, username: str) -> None:
    page.goto("/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", PASSWORDS[username])
    page.click("button[type=submit], input[type=submit]")
    page.wait_for_load_state("networkidle")
    assert "/accounts/login/" not in page.url, f"{username} could not log in"


def screenshot(page: Page, name: str, tmp_path: Path) -> Path:
    folder = Path(os.environ.get("SCREENSHOT_DIR") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


OVERFLOW_JS = """
() => {
  const bad = [];
  for (const card of document.querySelectorAll('.card, [data-card]')) {
    const box = card.getBoundingClientRect();
    for (const child of card.querySelectorAll('.js-plotly-plot, table, svg.main-svg, canvas')) {
      const r = child.getBoundingClientRect();
      if (r.width === 0 && r.height === 0) continue;
      if (r.left < box.left - 1 || r.right > box.right + 1 || r.top < box.top - 1 || r.bottom > box.bottom + 1) {
        bad.push(`${child.tagName.toLowerCase()}${child.id ? '#' + child.id : ''} overflows ` +
                 `${card.querySelector('h2,h3,h4,.card-title')?.textContent?.trim() || 'a card'}`);
      }
    }
  }
  // A chart's legend must not sit on its x axis's tick labels (two-line date ticks did).
  const overlaps = (a, b) => a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
  for (const chart of document.querySelectorAll('.js-plotly-plot')) {
    const legend = chart.querySelector('g.legend');
    if (!legend) continue;
    const l = legend.getBoundingClientRect();
    for (const tick of chart.querySelectorAll('g.xtick text')) {
      if (overlaps(l, tick.getBoundingClientRect())) {
        bad.push(`the legend of ${chart.querySelector('.gtitle')?.textContent || 'a chart'} covers its x axis labels`);
        break;
      }
    }
  }
  return bad;
}
"""


def assert_nothing_overflows(page: Page) -> None:
    """Every chart and table lies inside the card that holds it (a clipped chart is a bug), and no chart's
    legend covers its x axis labels."""
    assert page.evaluate(OVERFLOW_JS) == []
