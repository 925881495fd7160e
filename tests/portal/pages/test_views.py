"""The browser pages (``portal.pages``): login, the submit form, job pages, dashboard, queues, admin."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from portal.jobs.models import Job, QuotaChange
from scheduling.models import NodePool, SimNode

pytestmark = pytest.mark.django_db

FORM = {
    "name": "from-the-form",
    "queue": "vision/default",
    "kind": "training",
    "image": "pytorch:2.4",
    "command": "python train.py",
    "replicas": "2",
    "min_available": "0",
    "gpu": "1",
    "gpu_milli": "0",
    "mig_profile": "",
    "gpu_memory_gib": "0",
    "cpu_milli": "4000",
    "memory_mib": "16384",
    "allowed_gpu_models": ["A100-80GB"],
    "priority_class": "default",
    "runtime_s": "600",
}


def test_pages_require_login(client, world):
    response = client.get("/jobs/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_login_then_submit_with_the_form_and_see_the_job(client, world, django_capture_on_commit_callbacks):
    response = client.post("/accounts/login/", {"username": "alice", "password": "pw-alice"})
    assert response.status_code == 302
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        created = client.post("/jobs/new/", FORM)
    assert callbacks[0].__name__ == "_request_cycle"  # the submission asked for a scheduling cycle
    assert created.status_code == 302, created.content.decode()[:2000]
    job = Job.objects.get()
    assert created["Location"] == f"/jobs/{job.pk}/"
    assert (job.name, job.replicas, job.gpu, job.team.slug) == ("from-the-form", 2, 1, "vision")
    assert [m.name for m in job.allowed_gpu_models.all()] == ["A100-80GB"]

    # The cycle ran on submit (eager tasks): the job is admitted and placed.
    job.refresh_from_db()
    assert job.state == "Admitted"
    detail = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "from-the-form" in detail
    assert "State history" in detail
    assert re.search(r"a100-\d", detail), "placement node shown"
    assert "Admitted" in detail

    listing = client.get("/jobs/").content.decode()
    assert f'href="/jobs/{job.pk}/"' in listing
    filtered = client.get("/jobs/?state=Succeeded").content.decode()
    assert f'href="/jobs/{job.pk}/"' not in filtered
    # A job exists: an empty filtered list says the filters match none, not that there are no jobs.
    assert "No job matches these filters." in filtered
    assert "No jobs yet." not in filtered
    assert "No job matches" not in listing


def test_an_empty_job_list_says_whether_there_are_no_jobs_or_the_filters_match_none(client, world):
    client.force_login(world.users["alice"])
    assert "No jobs yet." in client.get("/jobs/").content.decode()
    for query in ("state=Failed", "q=nothing-like-this", f"team={world.teams['vision'].slug}"):
        page = client.get(f"/jobs/?{query}").content.decode()
        assert "No job matches these filters." in page, query


def test_the_form_shows_field_errors_and_creates_nothing(client, world):
    client.force_login(world.users["alice"])
    response = client.post("/jobs/new/", {**FORM, "gpu": "1", "gpu_milli": "500"})
    assert response.status_code == 400
    assert "set only one of" in response.content.decode()
    response = client.post("/jobs/new/", {**FORM, "allowed_gpu_models": ["B200"]})
    assert response.status_code == 400
    assert Job.objects.count() == 0


AFFINITY_YAML = """
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
      - matchExpressions:
        - key: gpu-type
          operator: In
          values: [A100, H100]
  podAntiAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
    - topologyKey: kubernetes.io/hostname
"""
SPREAD_YAML = """
- maxSkew: 1
  topologyKey: topology.kubernetes.io/zone
  whenUnsatisfiable: ScheduleAnyway
"""


def test_placement_rules_pasted_as_yaml_are_stored_obeyed_and_shown(client, world, django_capture_on_commit_callbacks):
    SimNode.objects.filter(name__startswith="a100").update(labels={"gpu-type": "A100", "pool": "train"})
    NodePool.objects.create(name="train", node_selector={"pool": "train"}, placement="spread")
    client.force_login(world.users["alice"])
    form = {**FORM, "affinity": AFFINITY_YAML, "topology_spread_constraints": SPREAD_YAML, "required_topology": ""}
    with django_capture_on_commit_callbacks(execute=True):
        created = client.post("/jobs/new/", form)
    assert created.status_code == 302, created.content.decode()[:3000]
    job = Job.objects.get()
    assert job.affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": "gpu-type", "operator": "In", "values": ["A100", "H100"]}]}
    ]
    assert job.topology_spread_constraints[0]["whenUnsatisfiable"] == "ScheduleAnyway"
    job.refresh_from_db()
    assert job.state == "Admitted"
    assert sorted(p.node for p in job.placements.all()) == ["a100-0", "a100-1"]  # anti-affinity
    detail = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "gpu-type In [A100, H100]" in detail
    assert "required: at most one replica per kubernetes.io/hostname" in detail
    assert "maxSkew 1 over topology.kubernetes.io/zone, ScheduleAnyway" in detail
    assert "<th>Node pool</th>" in detail
    assert "<td>train</td>" in detail
    queues = client.get("/queues/").content.decode()
    assert "Node pools" in queues
    assert "<code>pool=train</code>" in queues


@pytest.mark.parametrize(
    ("field", "text", "error"),
    [
        ("affinity", "nodeAffinity: [unclosed", "not valid YAML: line 1"),
        ("affinity", "a: &x [1]\nb: *x", "YAML aliases (*name) are not accepted"),
        ("affinity", "- 1", "expected a mapping (as under a pod spec&#x27;s affinity)"),
        ("affinity", "podAffinity: {}", "pod affinity is not supported"),
        ("topology_spread_constraints", "maxSkew: 1", "expected a list"),
        (
            "topology_spread_constraints",
            "- {maxSkew: 0, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}",
            "[0].maxSkew: must be between 1",
        ),
    ],
)
def test_bad_placement_rules_are_named_on_the_form_and_nothing_is_created(client, world, field, text, error):
    client.force_login(world.users["alice"])
    response = client.post("/jobs/new/", {**FORM, field: text})
    assert response.status_code == 400
    assert error in response.content.decode()


def test_the_form_refuses_a_job_that_never_fits_and_names_the_limit(client, world):
    client.force_login(world.users["alice"])
    response = client.post("/jobs/new/", {**FORM, "replicas": "1", "gpu": "16"})
    assert response.status_code == 400
    html = response.content.decode()
    assert "never fits as configured: one replica needs 16 A100-80GB GPUs and the largest A100-80GB node has 8" in html
    assert Job.objects.count() == 0


def test_the_live_check_says_when_the_state_it_answers_from_was_read(client, world, settings):
    """The answer comes from the last cycle's kept state, which may be up to DRY_RUN_STALE_S old: the
    fragment names that time, not the time of the request."""
    from scheduling.dry_run import dry_run_forget, dry_run_state

    settings.CLUSTER_BACKEND = "simulated"
    dry_run_forget()
    _, as_of = dry_run_state()
    client.force_login(world.users["alice"])
    html = client.post("/jobs/new/check/", FORM).content.decode()
    assert 'id="check-verdict"' in html
    stamp = timezone.localtime(as_of).strftime("%Y-%m-%d %H:%M:%S")
    assert f"On the cluster and queues as they stood at {stamp} UTC, and the jobs submitted since." in html
    dry_run_forget()


def test_the_live_check_prices_an_inference_replica_by_the_hour(client, world, settings):
    """An inference replica runs until stopped: the form's live check shows its hourly rate, not a
    total for the longest runtime a job may ask for."""
    from billing.services import price_book_seed_defaults
    from scheduling.dry_run import dry_run_forget

    settings.CLUSTER_BACKEND = "simulated"
    price_book_seed_defaults()
    dry_run_forget()
    client.force_login(world.users["alice"])
    html = client.post("/jobs/new/check/", {**FORM, "kind": "inference", "replicas": "1"}).content.decode()
    assert 'id="check-cost"' in html
    assert "an hour while it runs" in html
    assert "of the cluster" not in html
    training = client.post("/jobs/new/check/", {**FORM, "replicas": "1"}).content.decode()
    assert "s of the cluster" in training
    assert "an hour while it runs" not in training
    dry_run_forget()


def test_another_teams_job_page_is_404(client, world):
    job = world.submit("vision")
    client.force_login(world.users["bob"])
    assert client.get(f"/jobs/{job.pk}/").status_code == 404
    assert client.post(f"/jobs/{job.pk}/cancel/").status_code == 404
    assert f"/jobs/{job.pk}/" not in client.get("/jobs/").content.decode()


def test_cancel_from_the_detail_page_asks_for_confirmation_first(client, world):
    job = world.submit("vision", name="to-cancel")
    client.force_login(world.users["alice"])
    detail = client.get(f"/jobs/{job.pk}/").content.decode()
    assert f'href="/jobs/{job.pk}/cancel/"' in detail  # a link to the confirmation, not a one-click form
    confirm = client.get(f"/jobs/{job.pk}/cancel/")
    assert confirm.status_code == 200
    assert f"Cancel job {job.pk} · to-cancel?" in confirm.content.decode()
    # A POST without the confirmation (an old form, a stray click) only shows the question again.
    assert client.post(f"/jobs/{job.pk}/cancel/").status_code == 200
    job.refresh_from_db()
    assert job.state == "Pending"
    response = client.post(f"/jobs/{job.pk}/cancel/", {"confirm": "yes"})
    assert response.status_code == 302
    job.refresh_from_db()
    assert job.state == "Cancelled"
    # Nothing left to cancel: the confirmation page sends the user back with the reason.
    again = client.get(f"/jobs/{job.pk}/cancel/", follow=True).content.decode()
    assert "A Cancelled job cannot be cancelled." in again


def test_pending_job_page_explains_why(client, world):
    from django.utils import timezone

    from scheduling.adapters.simulated import SimulatedCluster
    from scheduling.services import cycle_run

    # The queue may hold 16 A100s (8 nominal + 8 borrowed): with 8 held, a gang of 2 x 8 waits on quota.
    a100 = (world.models["A100-80GB"],)
    world.submit("vision", gpu=8, allowed_gpu_models=a100)
    waiting = world.submit("vision", gpu=8, replicas=2, allowed_gpu_models=a100)
    cycle_run(now=timezone.now(), backend=SimulatedCluster())
    client.force_login(world.users["alice"])
    page = client.get(f"/jobs/{waiting.pk}/").content.decode()
    assert "Why:" in page
    assert (
        "quota: queue cq-vision uses 8 of 8 A100-80GB GPUs and needs 16 more; cohort research has 8 borrowable" in page
    )
    assert "Waiting can help" in page
    assert "Position 1" in page


def test_a_never_fitting_job_queued_on_an_autoscaling_cluster_says_waiting_will_not_help(client, world, settings):
    from django.utils import timezone

    from scheduling.adapters.simulated import SimulatedCluster
    from scheduling.services import cycle_run

    settings.QUEUE_NEVER_FITTING_JOBS = True
    # 3 x 8 A100s: more than the 16 the queue may ever hold.
    never = world.submit("vision", gpu=8, replicas=3, allowed_gpu_models=(world.models["A100-80GB"],))
    cycle_run(now=timezone.now(), backend=SimulatedCluster())
    client.force_login(world.users["alice"])
    page = client.get(f"/jobs/{never.pk}/").content.decode()
    assert (
        "quota: never fits as configured: needs 24 A100-80GB GPUs at once and queue cq-vision may hold at most 16 "
        "(nominal 8 + 8 it may borrow in cohort research)"
    ) in page
    assert "Waiting will not help" in page
    listing = client.get("/jobs/").content.decode()
    assert "never fits" in listing


def test_dashboard_and_queue_pages_render_charts_and_quotas(client, world):
    client.force_login(world.users["alice"])
    dashboard = client.get("/dashboard/")
    assert dashboard.status_code == 200
    html = dashboard.content.decode()
    assert "Cluster GPU allocation" in html
    assert "GPU-hours per team per day" in html
    # plotly's bundle is a static file (collected, compressed and cached for good), not inline.
    assert '<script src="/static/vendor/plotly/plotly-basic.min.js"></script>' in html
    assert "Plotly.newPlot" in html
    assert len(html) < 500_000
    queues = client.get("/queues/").content.decode()
    assert "cq-vision" in queues
    assert "A100-80GB" in queues


def test_admin_lists_every_model_with_search_and_filters(client, world):
    client.force_login(world.users["admin"])
    for path in (
        "jobs/job",
        "jobs/clusterqueue",
        "jobs/localqueue",
        "jobs/gpumodel",
        "jobs/priorityclass",
        "jobs/quotachange",
        "tenants/team",
        "tenants/membership",
        "scheduling/simnode",
        "scheduling/cyclerun",
    ):
        response = client.get(f"/admin/{path}/?q=a")
        assert response.status_code == 200, path


def test_admin_quota_edit_is_recorded_with_who_and_old_and_new(client, world):
    cq = world.cluster_queues["vision"]
    flavors = list(cq.flavors.order_by("order"))
    client.force_login(world.users["admin"])
    data = {
        "name": cq.name,
        "cohort": cq.cohort,
        "cpu_quota_milli": "",
        "memory_quota_mib": "",
        "weight": "1.0",
        "flavors-TOTAL_FORMS": str(len(flavors)),
        "flavors-INITIAL_FORMS": str(len(flavors)),
        "flavors-MIN_NUM_FORMS": "0",
        "flavors-MAX_NUM_FORMS": "1000",
        "quota_changes-TOTAL_FORMS": "0",
        "quota_changes-INITIAL_FORMS": "0",
        "quota_changes-MIN_NUM_FORMS": "0",
        "quota_changes-MAX_NUM_FORMS": "1000",
    }
    for i, flavor in enumerate(flavors):
        data.update(
            {
                f"flavors-{i}-id": str(flavor.pk),
                f"flavors-{i}-cluster_queue": str(cq.pk),
                f"flavors-{i}-gpu_model": str(flavor.gpu_model_id),
                f"flavors-{i}-nominal_gpus": "16" if flavor.gpu_model.name == "A100-80GB" else str(flavor.nominal_gpus),
                f"flavors-{i}-borrowing_limit": "",
                f"flavors-{i}-lending_limit": "",
                f"flavors-{i}-order": str(flavor.order),
            }
        )
    response = client.post(f"/admin/jobs/clusterqueue/{cq.pk}/change/", data)
    assert response.status_code == 302, response.content.decode()[:3000]
    change = QuotaChange.objects.get()
    assert (change.field, change.old_value, change.new_value, change.changed_by.username) == (
        "A100-80GB nominal_gpus",
        "8",
        "16",
        "admin",
    )
    page = client.get(f"/admin/jobs/clusterqueue/{cq.pk}/change/").content.decode()
    assert "A100-80GB nominal_gpus" in page


def test_allocation_buckets_hold_exact_gpu_seconds_even_for_short_jobs():
    from datetime import UTC, datetime, timedelta

    from portal.pages.charts import allocation_series

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    intervals = [
        (t0 + timedelta(minutes=10), t0 + timedelta(minutes=20), "A100", 2.0),  # inside bucket 0
        (t0 + timedelta(minutes=50), t0 + timedelta(minutes=130), "A100", 1.0),  # spans buckets 0-2
        (t0 - timedelta(hours=5), t0 + timedelta(minutes=30), "T4", 0.5),  # starts before the window
    ]
    times, series = allocation_series(intervals, start=t0, end=t0 + timedelta(hours=3), buckets=3)
    assert times == [t0, t0 + timedelta(hours=1), t0 + timedelta(hours=2)]
    # bucket 0: 2 GPUs x 10 min + 1 GPU x 10 min = 30 GPU-min over 60 min = 0.5 GPUs on average
    assert series["A100"] == [0.5, 1.0, round(10 / 60, 6)]
    assert series["T4"] == [0.25, 0.0, 0.0]
    area_gpu_minutes = sum(series["A100"]) * 60
    assert round(area_gpu_minutes, 3) == 2 * 10 + 80


def test_the_allocation_chart_counts_a_run_that_began_before_the_window_and_was_preempted_in_it(world):
    from datetime import timedelta

    from django.utils import timezone

    from portal.jobs.transitions import job_transition
    from portal.pages.views import running_intervals

    now = timezone.now()
    since = now - timedelta(hours=2)
    job = world.submit("vision", gpu=2)
    detail = {"gpu_model": "A100-80GB", "gpus": "2"}
    job_transition(job=job, to_state="Admitted", at=now - timedelta(hours=5), detail=detail)
    job_transition(job=job, to_state="Running", at=now - timedelta(hours=5), detail=detail)
    job_transition(job=job, to_state="Preempted", at=now - timedelta(hours=1), reason="preempted")
    job_transition(job=job, to_state="Pending", at=now - timedelta(hours=1), reason="requeued")
    assert running_intervals(since=since, now=now) == [(since, now - timedelta(hours=1), "A100-80GB", 2.0)]


def test_the_next_page_link_keeps_a_search_with_an_ampersand(client, world):
    for _ in range(26):
        world.submit("vision", name="a&b")
    client.force_login(world.users["alice"])
    page = client.get("/jobs/", {"q": "a&b"}).content.decode()
    assert "(26)" in page
    assert "q=a%26b" in page


def _run(world, **spec):
    """A job admitted and running on the simulated cluster for ten minutes."""
    from datetime import timedelta

    from django.utils import timezone

    from scheduling.adapters.simulated import SimulatedCluster
    from scheduling.services import cluster_sync, cycle_run

    job = world.submit("vision", **spec)
    backend = SimulatedCluster(speedup=1.0)
    start = timezone.now() - timedelta(minutes=10)
    cycle_run(now=start, backend=backend)
    cluster_sync(backend=backend, now=start + timedelta(seconds=1))
    job.refresh_from_db()
    return job


def test_the_list_shows_owner_run_time_gpu_hours_cost_and_where_each_job_ran(client, world):
    from portal.jobs.services import job_cancel

    job = _run(world, name="ran-and-stopped", gpu=2)
    job_cancel(job=job, by=world.users["alice"])
    running = _run(world, name="still-running", gpu=1)
    client.force_login(world.users["alice"])
    html = client.get("/jobs/").content.decode()
    row = re.search(rf'<tr data-job="{running.pk}">(.*?)</tr>', html, re.S).group(1)
    assert "<td>alice</td>" in row
    assert re.search(r"A100-80GB on a100-\d", row)
    assert re.search(r"10 min", row)
    assert re.search(r"\$\d", row)
    # A job that stopped keeps saying where it ran: no "A100-80GB on" with nothing after it.
    stopped = re.search(rf'<tr data-job="{job.pk}">(.*?)</tr>', html, re.S).group(1)
    assert re.search(r"ran on A100-80GB on a100-\d", stopped)
    assert re.search(r"\$\d", stopped)


def test_the_list_sorts_by_cost_and_costs_the_same_queries_for_any_number_of_jobs(client, world):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    big = _run(world, name="big", gpu=4)
    small = _run(world, name="small", gpu=1)
    client.force_login(world.users["alice"])
    html = client.get("/jobs/?sort=-cost").content.decode()
    assert html.index(f'data-job="{big.pk}"') < html.index(f'data-job="{small.pk}"')
    html = client.get("/jobs/?sort=cost").content.decode()
    assert html.index(f'data-job="{small.pk}"') < html.index(f'data-job="{big.pk}"')
    assert 'href="?sort=-cost"' in client.get("/jobs/").content.decode()

    def queries():
        with CaptureQueriesContext(connection) as captured:
            assert client.get("/jobs/?sort=-gpu_hours").status_code == 200
        return len(captured.captured_queries)

    few = queries()
    for _ in range(4):
        _run(world, gpu=1)
    assert queries() == few


def test_the_list_and_the_job_page_refresh_their_live_part_without_a_reload(client, world):
    job = _run(world, name="live", gpu=1)
    client.force_login(world.users["alice"])
    rows = client.get("/jobs/", HTTP_HX_REQUEST="true")
    assert rows.status_code == 200
    assert rows.content.decode().lstrip().startswith('<tbody id="job-rows" hx-get="/jobs/"')
    live = client.get(f"/jobs/{job.pk}/", HTTP_HX_REQUEST="true").content.decode()
    assert live.lstrip().startswith('<div id="job-live" hx-get=')
    assert "Attempt 1" in live
    assert "<h1>" not in live  # only the live part
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "django_htmx/htmx-2.min.js" in page
    # A finished job's live part stops polling.
    Job.objects.filter(pk=job.pk).update(state="Succeeded")
    done = client.get(f"/jobs/{job.pk}/", HTTP_HX_REQUEST="true").content.decode()
    assert "hx-trigger" not in done.split(">", 1)[0]


def test_a_requeued_job_page_shows_its_attempts_and_what_it_does_now(client, world):
    from scheduling.adapters import apply
    from scheduling.adapters.simulated import SimulatedCluster
    from scheduling.engine.model import Preemption

    job = _run(world, name="requeued", gpu=1)
    apply.preemption_apply(
        Preemption(str(job.pk), "", "preempted by job 99 (critical)"), now=job.started_at, backend=SimulatedCluster()
    )
    client.force_login(world.users["alice"])
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "Attempt 1" in page
    assert "preempted by job 99 (critical)" in page
    assert "→ requeued" in page
    assert "waiting again since" in page
    assert "for admission 2" in page
    assert "Not placed" not in page


def test_a_pending_job_without_an_estimate_is_not_told_it_does_not_fit(client, world):
    job = world.submit("vision", name="quota-blocked")
    Job.objects.filter(pk=job.pk).update(
        pending_reason={
            "kind": "quota",
            "message": "quota: queue cq-vision uses 8 of 8 A100-80GB GPUs",
            "waits": True,
            "details": {},
        },
        queue_position=1,
    )
    client.force_login(world.users["alice"])
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "does not fit" not in page
    assert "never fits" not in page
    assert "No start estimate: the forecast did not reach it" in page
    Job.objects.filter(pk=job.pk).update(
        pending_reason={"kind": "quota", "message": "quota: never fits as configured", "waits": False, "details": {}}
    )
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "Waiting will not help" in page
    assert "No start estimate" not in page


def test_the_pending_line_names_the_time_zone_once_and_the_position_as_its_own_sentence(client, world):
    job = world.submit("vision", name="quota-blocked")
    Job.objects.filter(pk=job.pk).update(
        pending_reason={"kind": "quota", "message": "quota: queue cq-vision uses 8 of 8", "waits": True, "details": {}},
        queue_position=3,
    )
    client.force_login(world.users["alice"])
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "UTC UTC" not in page
    assert "UTC for its first admission" in page
    assert "uses 8 of 8. Position 3 in default." in page
    Job.objects.filter(pk=job.pk).update(
        pending_reason={"kind": "quota", "message": "quota: full.", "waits": True, "details": {}}
    )
    assert "quota: full. Position 3 in default." in client.get(f"/jobs/{job.pk}/").content.decode()


def test_a_job_waiting_for_its_window_is_not_told_what_it_needs_is_in_use(client, world):
    job = world.submit("vision", name="later")
    opens = timezone.now() + timedelta(hours=6)
    Job.objects.filter(pk=job.pk).update(
        pending_reason={"kind": "window", "message": "waits for its start window", "waits": True, "details": {}},
        estimated_start=opens,
    )
    client.force_login(world.users["alice"])
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "it may start once its start window opens" in page
    assert "in use now" not in page


def test_the_gang_line_appears_only_for_several_replicas(client, world):
    one = world.submit("vision", name="single")
    gang = world.submit("vision", name="gang", replicas=4, min_available=2)
    client.force_login(world.users["alice"])
    assert "Gang" not in client.get(f"/jobs/{one.pk}/").content.decode()
    assert "at least 2 of 4 replicas start together" in client.get(f"/jobs/{gang.pk}/").content.decode()


def test_form_errors_use_the_forms_labels_not_api_field_names(client, world):
    client.force_login(world.users["alice"])
    html = client.post("/jobs/new/", {**FORM, "gpu": "1", "gpu_milli": "500"}).content.decode()
    errors = re.search(r'<ul class="errorlist" id="id_gpu_milli_errors">(.*?)</ul>', html, re.S).group(1)
    assert "GPU fraction (milli-GPU):" in errors
    assert "this request sets whole GPUs and a GPU fraction" in errors
    assert "gpu_milli" not in errors
    html = client.post("/jobs/new/", {**FORM, "image": "not a valid image ref!!"}).content.decode()
    assert "Image: &#x27;not a valid image ref!!&#x27; is not an image reference" in html
    assert Job.objects.count() == 0


def test_the_mig_profile_is_a_choice_from_the_catalogue_filtered_by_gpu_model(client, world):
    client.force_login(world.users["alice"])
    form = client.get("/jobs/new/").content.decode()
    select = re.search(r'<select name="mig_profile"[^>]*>(.*?)</select>', form, re.S).group(1)
    assert '<option value="3g.40gb">3g.40gb (A100-80GB)</option>' in select
    assert 'value="1g.10gb"' in select
    options = client.get("/jobs/new/mig-profiles/?allowed_gpu_models=T4").content.decode()
    assert "3g.40gb" not in options  # T4 has no MIG
    options = client.get("/jobs/new/mig-profiles/?allowed_gpu_models=A100-80GB&mig_profile=2g.20gb").content.decode()
    assert '<option value="2g.20gb" selected>' in options
    from scheduling.models import SimNode

    SimNode.objects.filter(name="a100-1").update(mig_enabled=True)  # a node that can hold the slice
    created = client.post(
        "/jobs/new/", {**FORM, "gpu": "0", "mig_profile": "3g.40gb", "allowed_gpu_models": ["A100-80GB"]}
    )
    assert created.status_code == 302
    assert Job.objects.get().mig_profile == "3g.40gb"
    refused = client.post("/jobs/new/", {**FORM, "gpu": "0", "mig_profile": "9g.999gb"})
    assert refused.status_code == 400


def test_the_form_submits_an_off_peak_job_and_a_night_window(client, world):
    client.force_login(world.users["alice"])
    page = client.get("/jobs/new/").content.decode()
    assert "start only between 20:00 and 08:00 UTC" in page
    created = client.post("/jobs/new/", {**FORM, "off_peak": "on", "start_after": "2030-01-02T03:04"})
    assert created.status_code == 302, created.content.decode()[:2000]
    job = Job.objects.get()
    assert job.off_peak is True
    assert job.start_after.isoformat() == "2030-01-02T03:04:00+00:00"
    response = client.post("/jobs/new/", {**FORM, "start_window": "8pm-8am"})
    assert response.status_code == 400
    assert "is not a time like 20:00" in response.content.decode()


def test_a_preempted_jobs_page_names_the_rule_that_chose_it_and_its_class_minimum_runtime(client, world):
    from datetime import timedelta

    from django.utils import timezone

    from scheduling.adapters.simulated import SimulatedCluster
    from scheduling.services import cycle_run

    low = world.priorities["low"]
    low.min_runtime_s = 600
    low.save()
    a100 = (world.models["A100-80GB"],)
    start = timezone.now()
    # A day of runtime: the simulated cluster (60x speed-up) does not finish them during the test.
    victims = [
        world.submit("vision", gpu=8, allowed_gpu_models=a100, priority_class=low, runtime_s=86_400) for _ in range(2)
    ]
    cycle_run(now=start, backend=SimulatedCluster())
    urgent = world.submit("vision", gpu=8, allowed_gpu_models=a100, priority_class=world.priorities["critical"])
    cycle_run(now=start + timedelta(seconds=60), backend=SimulatedCluster())  # both still protected
    assert not Job.objects.filter(pk__in=[v.pk for v in victims], state="Preempted").exists()
    assert all(v.transitions.filter(to_state="Preempted").count() == 0 for v in victims)
    cycle_run(now=start + timedelta(seconds=700), backend=SimulatedCluster())
    (preempted,) = [v for v in victims if v.transitions.filter(to_state="Preempted").exists()]
    client.force_login(world.users["alice"])
    page = client.get(f"/jobs/{preempted.pk}/").content.decode()
    assert "low (100, not preempted in its first 600 s)" in page
    rule = f"priority: {urgent.pk} (priority 10000) outranks it (priority 100); rule: least-work minimal victim set"
    assert rule in page


def test_the_form_submits_a_ray_job_pasted_as_yaml_names_a_bad_group_and_the_page_shows_it(client, world):
    client.force_login(world.users["alice"])
    ray = "mode: job\nentrypoint: python tune.py\nworker_groups:\n  - {name: gpu, replicas: 2, gpu: 4}\n"
    ray_form = {**FORM, "kind": "ray", "replicas": "1", "gpu": "0", "ray": ray}
    html = client.post("/jobs/new/", {**ray_form, "ray": ray.replace("gpu: 4", "gpu: 99")}).content.decode()
    errors = re.search(r'<ul class="errorlist" id="id_ray_errors">(.*?)</ul>', html, re.S).group(1)
    assert "ray.worker_groups.0.gpu: an integer from 0 to 64" in errors
    assert Job.objects.count() == 0
    created = client.post("/jobs/new/", ray_form)
    assert created.status_code == 302, created.content.decode()[:2000]
    job = Job.objects.get()
    assert job.ray["worker_groups"] == [{"name": "gpu", "replicas": 2, "gpu": 4}]
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "a RayJob running <code>python tune.py</code>" in page
    assert "head (no GPU, 4 CPU, 16384 MiB) + 2 × (4 GPU, 1 CPU, 4096 MiB) gpu" in page


def test_the_requested_runtime_reads_as_a_duration_and_in_the_simulated_clusters_time(client, world, settings):
    settings.CLUSTER_BACKEND = "simulated"
    settings.SIM_SPEEDUP = 60.0
    job = world.submit("vision", gpu=1, runtime_s=36_000)  # 10 h asked: 10 min of the simulated cluster's
    client.force_login(world.users["alice"])
    text = " ".join(client.get(f"/jobs/{job.pk}/").content.decode().split())
    assert (
        "<dt>Requested runtime</dt><dd>10 h 00 min (10 min on this simulated cluster, which runs jobs 60× faster)</dd>"
        in text
    )
    settings.CLUSTER_BACKEND = "kubernetes"  # a real cluster runs jobs at their own pace
    settings.K8S_IN_CLUSTER = False
    text = " ".join(client.get(f"/jobs/{job.pk}/").content.decode().split())
    assert "<dt>Requested runtime</dt><dd>10 h 00 min</dd>" in text


def test_the_dashboard_says_each_teams_gpu_hours_with_two_decimals(client, world):
    from datetime import timedelta

    from django.utils import timezone

    from billing.services import metering_run
    from tests.billing.conftest import Run, run_job

    start = timezone.now().replace(microsecond=0) - timedelta(days=2)
    run_job(world, gpu=1, runs=[Run(start, start + timedelta(minutes=78))])  # 1.3 GPU-hours
    run_job(world, team="nlp", gpu=2, runs=[Run(start, start + timedelta(hours=1))])  # 2
    metering_run()
    client.force_login(world.users["admin"])
    html = client.get("/dashboard/").content.decode()
    assert "GPU-hours, last 14 days: <strong>nlp</strong> 2.00 · <strong>vision</strong> 1.30</div>" in html


@pytest.mark.django_db
def test_an_inference_replica_page_says_it_runs_until_stopped_and_shows_its_hourly_rate(client, world):
    # Its runtime_s is the 90-day ceiling, not a request: the page must not offer it as the requested
    # runtime or price a total from it. The rate: one A100 + 4 CPU + 8 GiB at the seeded on-demand prices.
    from decimal import Decimal

    from billing.models import PriceBookEntry
    from billing.services import price_book_seed_defaults
    from tests.billing.conftest import Run, run_job

    price_book_seed_defaults()
    now = timezone.now()
    replica = run_job(
        world, gpu=1, cpu_milli=4000, memory_mib=8192, kind=Job.Kind.INFERENCE, runtime_s=90 * 24 * 3600,
        runs=[Run(now - timedelta(minutes=30), None)],
    ).job  # fmt: skip
    price = {
        r: PriceBookEntry.objects.get(
            resource=r, gpu_model="A100-80GB" if r == "gpu" else "", capacity_type="on-demand"
        )
        for r in ("gpu", "cpu", "memory")
    }
    hourly = price["gpu"].usd_per_hour + 4 * price["cpu"].usd_per_hour + 8 * price["memory"].usd_per_hour
    client.force_login(world.users["alice"])
    html = client.get(f"/jobs/{replica.pk}/").content.decode()
    assert "until stopped" in html
    assert "90 d" not in html
    assert "if this attempt runs its requested time" not in html
    assert f"${hourly.quantize(Decimal('0.01')):,}" in html
    assert "an hour while it runs" in html
