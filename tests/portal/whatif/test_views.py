from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from portal.jobs.models import Job
from portal.whatif.models import WhatIfRun
from scheduling.adapters.simulated import SimulatedCluster
from scheduling.services import cycle_run

pytestmark = pytest.mark.django_db


def logged_in(client, world, name):
    client.force_login(world.users[name])
    return client


@pytest.fixture(autouse=True)
def cycles_at_submission(settings):
    settings.CYCLE_BATCH_S = 0.0  # busy_history runs its cycle at the submissions' instant


def busy_history(world, *, hours_ago: int = 3):
    """Jobs submitted a few hours ago and scheduled by the real loop, one cycle a minute."""
    start = timezone.now().replace(microsecond=0) - timedelta(hours=hours_ago)
    backend = SimulatedCluster(speedup=1.0)
    for minute in range(120):
        now = start + timedelta(minutes=minute)
        if minute % 10 == 0:
            for team in ("vision", "nlp"):
                job = world.submit(team, gpu=4, runtime_s=1200)
                Job.objects.filter(pk=job.pk).update(created_at=now)
        cycle_run(now=now, backend=backend)


def test_a_member_who_is_no_admin_may_not_open_the_what_if_page(client, world):
    assert logged_in(client, world, "bob").get("/whatif/").status_code == 403


def test_the_form_shows_todays_quotas_to_an_admin_and_only_their_weight_to_a_team_admin(client, world):
    page = logged_in(client, world, "admin").get("/whatif/").content.decode()
    assert 'name="fq:cq-nlp:A100-80GB:nominal_gpus" value="8"' in page
    assert 'name="lq:nlp/default:weight"' in page
    client.logout()
    page = logged_in(client, world, "alice").get("/whatif/").content.decode()
    assert 'name="lq:vision/default:weight"' in page
    assert 'name="lq:nlp/default:weight"' not in page
    assert "fq:cq-nlp" not in page


def test_an_admin_replays_a_quota_cut_and_sees_both_columns(client, world, django_capture_on_commit_callbacks):
    busy_history(world)
    c = logged_in(client, world, "admin")
    form = {"days": "1", "fq:cq-nlp:A100-80GB:nominal_gpus": "2", "fq:cq-nlp:A100-80GB:borrowing_limit": "0"}
    with django_capture_on_commit_callbacks(execute=True):
        response = c.post("/whatif/", form)
    assert response.status_code == 302
    run = WhatIfRun.objects.get()
    assert run.changes == {
        "cluster_queues": {"cq-nlp": {"flavors": {"A100-80GB": {"nominal_gpus": 2, "borrowing_limit": 0}}}}
    }
    assert run.status == WhatIfRun.Status.DONE, run.error
    page = c.get(response["Location"]).content.decode()
    assert "<strong>0</strong> differing" in page
    assert "<strong>0</strong> jobs preempted a different number of times." in page
    # A stored check that found one: the job is named with both counts.
    job_id = Job.objects.order_by("pk").first().pk
    check = {**run.result["check"], "preempt_differ": 1, "preempt_examples": [[str(job_id), 0, 1]]}
    WhatIfRun.objects.filter(pk=run.pk).update(result={**run.result, "check": check})
    shown = c.get(response["Location"]).content.decode()
    assert (
        f'<strong>1</strong> job preempted a different number of times (<a href="/jobs/{job_id}/">#{job_id}</a>: '
        "0 recorded, 1 replayed)." in shown
    )
    assert page.count('class="muted">recorded</td>') == 2
    assert page.count("what-if</td>") == 2
    assert page.count("plotly-graph-div") == 4
    assert run.result["whatif"]["nlp"]["wait_p90_s"] > run.result["recorded"]["nlp"]["wait_p90_s"]


def test_a_team_admin_forging_another_teams_weight_gets_403_naming_it(client, world):
    response = logged_in(client, world, "alice").post("/whatif/", {"days": "7", "lq:nlp/default:weight": "5"})
    assert response.status_code == 403
    assert "local_queues.nlp/default" in response.content.decode()
    assert not WhatIfRun.objects.exists()


@pytest.mark.parametrize(
    ("form", "field"),
    [
        ({"days": "7", "fq:cq-nlp:A100-80GB:nominal_gpus": "lots"}, "cluster_queues.cq-nlp.flavors.A100-80GB"),
        ({"days": "7", "cq:cq-nlp:weight": "-1"}, "cluster_queues.cq-nlp.weight"),
        ({"days": "365"}, "days"),
        ({"days": "7", "placement": "nowhere"}, "placement"),
    ],
)
def test_a_bad_form_is_a_400_naming_the_field(client, world, form, field):
    response = logged_in(client, world, "admin").post("/whatif/", form)
    assert response.status_code == 400
    assert field in response.content.decode()


def test_a_running_run_polls_its_progress_and_other_users_cannot_see_it(client, world):
    run = WhatIfRun.objects.create(
        created_by=world.users["alice"],
        window_from=timezone.now() - timedelta(days=1),
        window_to=timezone.now(),
        status=WhatIfRun.Status.RUNNING,
        progress=0.42,
    )
    c = logged_in(client, world, "alice")
    fragment = c.get(f"/whatif/{run.pk}/", headers={"HX-Request": "true"}).content.decode()
    assert re.search(r"Replaying… 42 %", fragment)
    assert 'hx-trigger="every 1s"' in fragment
    client.logout()
    assert logged_in(client, world, "bob").get(f"/whatif/{run.pk}/").status_code == 404


def test_a_change_reads_in_words():
    from portal.whatif.views import changes_summary

    assert changes_summary(
        {
            "placement": "spread",
            "cluster_queues": {
                "cq-nlp": {"weight": 2.0, "flavors": {"A100-80GB": {"nominal_gpus": 2, "borrowing_limit": None}}}
            },
            "local_queues": {"vision/default": {"weight": 3.0}},
        }
    ) == [
        "placement policy: spread",
        "cq-nlp: fair-share weight 2",
        "cq-nlp A100-80GB: nominal GPUs 2, borrowing limit no limit",
        "vision/default: fair-share weight 3",
    ]


def test_a_failed_run_says_why_and_stops_polling(client, world):
    run = WhatIfRun.objects.create(
        created_by=world.users["admin"],
        window_from=timezone.now() - timedelta(days=1),
        window_to=timezone.now(),
        status=WhatIfRun.Status.FAILED,
        error="no nodes",
    )
    page = logged_in(client, world, "admin").get(f"/whatif/{run.pk}/").content.decode()
    assert "The replay failed: no nodes" in page
    assert "hx-trigger" not in page.split('id="progress"')[1].split(">")[0]


def test_admissions_the_replay_does_not_reproduce_are_listed_with_their_times(
    client, world, django_capture_on_commit_callbacks
):
    from portal.jobs.models import JobAttempt

    busy_history(world)
    # The portal admitted one job five minutes after the cycle would have (say its scheduler was down).
    attempt = JobAttempt.objects.filter(admitted_at__gt=timezone.now() - timedelta(hours=2)).order_by("pk").first()
    replayed_at = attempt.admitted_at
    late = replayed_at + timedelta(minutes=5)
    JobAttempt.objects.filter(pk=attempt.pk).update(admitted_at=late)
    c = logged_in(client, world, "admin")
    with django_capture_on_commit_callbacks(execute=True):
        response = c.post("/whatif/", {"days": "1"})
    run = WhatIfRun.objects.get()
    assert run.status == WhatIfRun.Status.DONE, run.error
    page = c.get(response["Location"]).content.decode()
    assert run.result["check"]["differ"] >= 1
    row = re.search(rf'<a href="/jobs/{attempt.job_id}/">#{attempt.job_id}</a></td>(.*?)</tr>', page, re.S)
    assert row, page
    cells = re.findall(r"<td>(.*?)</td>", row.group(1))
    assert cells == [late.strftime("%Y-%m-%d %H:%M:%S"), replayed_at.strftime("%Y-%m-%d %H:%M:%S"), "-300 s"]
    assert "POSIX" not in page
