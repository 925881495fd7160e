"""Cost pages (``billing.views``): the dashboard with its plotly charts and a team's monthly invoice
(HTML and CSV)."""

from __future__ import annotations

import csv
import io
import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.models import PriceBookEntry
from billing.services import metering_run
from tests.billing.conftest import Run, a100_price, over_a_hard_stop_budget, run_job, utc


@pytest.mark.django_db
def test_the_cost_dashboard_shows_charts_budgets_and_advice(world, logged_in, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    over_a_hard_stop_budget(world)
    page = logged_in("alice").get("/cost/?window=7d")
    assert page.status_code == 200
    html = page.content.decode()
    for text in (
        "GPU-hours per namespace",
        "Cost per namespace",
        "GPU-hours by GPU model",
        "GPU cost by GPU model",
        "GPU efficiency",
        "team-vision",
    ):
        assert text in html
    assert "new jobs blocked" in html
    # The budget is said once, with this month's figure: 4 GPU-hours of A100 against $1.
    used_pct = 4 * a100_price() * 100
    assert html.count(f'<strong class="used-pct">{used_pct:.0f} %</strong>') == 1
    assert 'class="fill fill-over" style="width: 100%"' in html  # red, capped at the bar's end
    assert "of the monthly GPU budget used" not in html  # the site-wide banner is not repeated here
    assert "team-nlp" not in html  # alice is not in nlp
    assert "Idle and allocated GPU capacity" not in html  # the cluster's idle capacity is for admins


@pytest.mark.django_db
def test_platform_admins_see_idle_capacity_on_the_dashboard(world, logged_in):
    from billing.services import capacity_record
    from scheduling.adapters.simulated import SimulatedCluster

    capacity_record(now=timezone.now() - timedelta(days=2), backend=SimulatedCluster())
    html = logged_in("admin").get("/cost/?window=24h").content.decode()
    assert "Idle and allocated GPU capacity" in html
    assert "idle capacity (no team’s)" in html


@pytest.mark.django_db
def test_a_team_invoice_in_html_and_csv(world, logged_in):
    run_job(world, gpu=2, runs=[Run(utc(2026, 10, 2), utc(2026, 10, 2, 3), "A100-80GB", "spot")])
    run_job(world, gpu=0, gpu_milli=500, runs=[Run(utc(2026, 10, 9), utc(2026, 10, 9, 2), "T4", "spot")])
    metering_run()
    client = logged_in("alice")
    assert client.get("/cost/invoice/vision/2026-10/").status_code == 200
    response = client.get("/cost/invoice/vision/2026-10.csv")
    assert response.status_code == 200
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    lines = {(r["gpu_model"], r["capacity_type"]): r for r in rows if r["gpu_model"] != "total"}
    assert Decimal(lines[("A100-80GB", "spot")]["gpu_hours"]) == 6
    assert Decimal(lines[("T4", "spot")]["gpu_hours"]) == 1
    spot = PriceBookEntry.objects.get(resource="gpu", gpu_model="A100-80GB", capacity_type="spot").usd_per_hour
    assert Decimal(lines[("A100-80GB", "spot")]["gpu_cost_usd"]) == 6 * spot
    total = next(r for r in rows if r["gpu_model"] == "total")["total_cost_usd"]
    assert Decimal(total) == sum(Decimal(r["total_cost_usd"]) for r in lines.values())


@pytest.mark.django_db
def test_another_teams_invoice_is_not_found(world, logged_in):
    assert logged_in("bob").get("/cost/invoice/vision/2026-10/").status_code == 404
    assert logged_in("admin").get("/cost/invoice/vision/2026-10/").status_code == 200


@pytest.mark.django_db
@pytest.mark.parametrize("month", ["2026-13", "0-1", "9999-12"])
def test_an_invoice_for_a_month_that_cannot_exist_is_not_found(world, logged_in, month):
    client = logged_in("alice")
    assert client.get(f"/cost/invoice/vision/{month}/").status_code == 404
    assert client.get(f"/cost/invoice/vision/{month}.csv").status_code == 404


@pytest.mark.django_db
def test_the_breakdown_fragment_shows_users_labels_and_quota_use_of_the_window_only(world, logged_in):
    now = timezone.now()
    start = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=5)
    run_job(world, gpu=2, labels=(("project", "lidar"),), runs=[Run(start, start + timedelta(hours=2))])
    run_job(world, team="nlp", gpu=1, runs=[Run(start, start + timedelta(hours=1))])
    metering_run()
    html = logged_in("alice").get("/cost/breakdown/?window=24h").content.decode()
    assert '<table id="by-user">' in html
    assert "<td>alice</td>" in html
    assert "bob" not in html  # nlp's user is not alice's to see
    assert "<td>lidar</td>" in html
    assert '<option value="project" selected>' in html
    assert "<td>vision</td>" in html
    assert "<td>nlp</td>" not in html


@pytest.mark.django_db
def test_recommendations_follow_the_chosen_window(world, logged_in):
    from billing.selectors.efficiency import job_recommendation_list
    from billing.utilization import SimulatedUtilization

    # A 4-GPU job that ran two days ago at the simulated cluster's figure for its id.
    old = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(days=2)
    history = run_job(world, gpu=4, runs=[Run(old, old + timedelta(hours=2))])
    metering_run(source=SimulatedUtilization(backend=LowUtilization()))
    teams = [world.teams["vision"]]
    recent = timezone.now() - timedelta(hours=24)
    assert [j.job_id for j in job_recommendation_list(teams=teams, since=old - timedelta(hours=1))] == [history.job.pk]
    assert job_recommendation_list(teams=teams, since=recent) == []
    # A window that ended before the job ran does not list it either.
    assert job_recommendation_list(teams=teams, since=old - timedelta(days=3), until=old - timedelta(days=1)) == []
    # The page loads its advice as a fragment of the same window.
    alice = logged_in("alice")
    page = alice.get("/cost/?window=7d").content.decode()
    assert 'hx-get="/cost/recommendations/?window=7d"' in page
    assert f">{history.job.pk} " in alice.get("/cost/recommendations/?window=7d").content.decode()
    assert f">{history.job.pk} " not in alice.get("/cost/recommendations/?window=24h").content.decode()
    assert f">{history.job.pk} " not in logged_in("bob").get("/cost/recommendations/?window=7d").content.decode()


class LowUtilization:
    def gpu_utilization(self, *, job_id, start, end):
        return 10.0


def test_no_cost_chart_puts_two_units_on_one_axis():
    from billing.charts import cost_dashboard_figures
    from billing.core.allocation import IDLE, ZERO, Allocation

    now = timezone.now()
    with_idle = Allocation(now, now, 1, "namespace", [], {IDLE: ZERO, "team-a": ZERO}, {"A100-80GB": ZERO})
    by_model = {"A100-80GB": ZERO}
    figures = cost_dashboard_figures(with_idle, by_model)
    assert set(figures) == {"gpu_hours", "cost", "models", "models_cost", "efficiency", "idle"}
    for name, figure in figures.items():
        title = figure.layout.yaxis.title.text
        assert title in {"GPU-hours", "USD", "%"}, (name, title)


def test_the_gpu_charts_by_model_have_no_bar_for_cpu_only_jobs():
    from billing.charts import cost_dashboard_figures
    from billing.core.allocation import ZERO, Allocation

    now = timezone.now()
    used = ZERO._replace(gpu_hours=Decimal("3"), gpu_cost=Decimal("12"))
    cpu_only = ZERO._replace(cpu_cost=Decimal("2"), total_cost=Decimal("2"))  # CPU and memory, no GPU
    allocation = Allocation(now, now, 1, "namespace", [], {"team-a": used}, {"A100-80GB": used})
    figures = cost_dashboard_figures(allocation, {"A100-80GB": used, "cpu-only": cpu_only})
    assert list(figures["models"].data[0].x) == ["A100-80GB"]
    assert list(figures["models"].data[0].y) == [3.0]
    assert list(figures["models_cost"].data[0].x) == ["A100-80GB"]
    assert list(figures["models_cost"].data[0].y) == [12.0]


@pytest.mark.django_db
def test_the_page_and_its_fragments_say_when_their_figures_were_read(world, logged_in, monkeypatch):
    """The breakdown loads after the page: a running job has accrued more by then, so each table says
    the time its figures hold at, and each figure is the usage up to that time."""
    read_at = timezone.now().replace(minute=20, second=0, microsecond=0)
    run_job(world, gpu=1, runs=[Run(read_at - timedelta(hours=2), None)])  # still running
    metering_run()
    alice = logged_in("alice")
    monkeypatch.setattr(timezone, "now", lambda: read_at)
    page = alice.get("/cost/?window=24h").content.decode()
    later = read_at + timedelta(minutes=30, seconds=7)
    monkeypatch.setattr(timezone, "now", lambda: later)
    fragment = alice.get("/cost/breakdown/?window=24h").content.decode()
    assert f'By namespace, 24h<span class="muted">, as of {read_at:%H:%M:%S} UTC</span>' in page
    assert f'By user, 24h<span class="muted">, as of {later:%H:%M:%S} UTC</span>' in fragment
    # 2 GPU-hours when the page was read; 2.5 (and 7 s) when the fragment was.
    assert '<td>team-vision</td><td class="num">2.00</td>' in page.replace("\n", "").replace("  ", "")
    assert '<td>alice</td><td class="num">2.50</td>' in fragment


@pytest.mark.django_db
def test_the_breakdown_the_page_loads_runs_up_to_the_pages_own_time(world, logged_in, monkeypatch):
    """The page asks its breakdown for its own time (``as_of``): by user adds up to by namespace even
    though a job runs on while the fragment loads; a stale or malformed time is not taken."""
    read_at = timezone.now().replace(minute=20, second=0, microsecond=0)
    run_job(world, gpu=1, runs=[Run(read_at - timedelta(hours=2), None)])  # still running
    finished = Run(read_at - timedelta(hours=5), read_at - timedelta(hours=4))
    run_job(world, gpu=1, labels=(("project", "lidar"),), runs=[finished])  # gives the label select
    metering_run()
    alice = logged_in("alice")
    monkeypatch.setattr(timezone, "now", lambda: read_at)
    page = alice.get("/cost/?window=24h").content.decode()
    found = re.search(r'hx-get="(/cost/breakdown/\?window=24h&amp;as_of=\d+)"', page)
    assert found is not None
    url = found.group(1).replace("&amp;", "&")
    later = read_at + timedelta(seconds=7)
    monkeypatch.setattr(timezone, "now", lambda: later)
    fragment = alice.get(url).content.decode()
    # 3 GPU-hours at the page's time, by namespace on the page and by user in its fragment.
    assert '<td>team-vision</td><td class="num">3.00</td>' in page.replace("\n", "").replace("  ", "")
    assert '<td>alice</td><td class="num">3.00</td>' in fragment
    assert f'By user, 24h<span class="muted">, as of {read_at:%H:%M:%S} UTC</span>' in fragment
    # Switching the label keeps the page's time.
    assert f"as_of={int(read_at.timestamp() * 1_000_000)}" in fragment
    # Eleven minutes on, the page's time is no longer kept; nonsense is ignored: both read now.
    much_later = read_at + timedelta(minutes=11)
    monkeypatch.setattr(timezone, "now", lambda: much_later)
    for stale in (url, "/cost/breakdown/?window=24h&as_of=x", "/cost/breakdown/?window=24h&as_of=99999999999999999999"):
        text = alice.get(stale).content.decode()
        assert f"as of {much_later:%H:%M:%S} UTC" in text


@pytest.mark.django_db
def test_a_running_labelled_job_not_metered_yet_is_in_the_label_breakdown(world, logged_in):
    """By user counts a running job's open usage; by label listed no key for it ("No labelled usage")."""
    now = timezone.now()
    run_job(world, gpu=1, labels=(("project", "lidar"),), runs=[Run(now - timedelta(hours=2), None)])
    fragment = logged_in("alice").get("/cost/breakdown/?window=24h").content.decode()
    assert '<option value="project" selected>' in fragment
    by_user = re.search(r'<td>alice</td><td class="num">([\d.]+)</td><td class="num">(\$[\d.,]+)</td>', fragment)
    by_label = re.search(r'<td>lidar</td><td class="num">([\d.]+)</td><td class="num">(\$[\d.,]+)</td>', fragment)
    assert by_user is not None
    assert by_label is not None
    assert by_label.groups() == by_user.groups()
    assert float(by_user.group(1)) == pytest.approx(2.0, abs=0.01)  # 1 GPU for 2 hours
