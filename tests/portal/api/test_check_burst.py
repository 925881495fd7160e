"""A burst of submissions between two cycles: each submission's answer (and a check) counts the jobs
submitted since the dry run's state was read (``scheduling.dry_run``, step 3), so they are not each
told the same free room. Checked against the rule worked by hand (two free 8-GPU A100 nodes: two
8-GPU jobs run now, the next wait behind them for a job's runtime) and against the next cycle."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from portal.jobs.models import Job
from portal.jobs.states import JobState
from scheduling.adapters.simulated import SimulatedCluster
from scheduling.dry_run import dry_run_state
from scheduling.services import cycle_run
from tests.portal.api.test_check import BODY, SPEEDUP, prices  # noqa: F401 (its autouse fixture: simulated, priced)

pytestmark = pytest.mark.django_db

RUNTIME_S = 3600
EIGHT = {**BODY, "gpu": 8, "cpu_milli": 1000, "memory_mib": 1024, "runtime_s": RUNTIME_S}


def at(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def test_each_submission_of_a_burst_is_told_what_the_jobs_before_it_leave(api, world):
    burst(api)


def test_with_the_state_shared_through_redis_the_burst_is_told_the_same(api, world, redis_cache):
    burst(api)  # the state is pickled into the shared cache without the copy the burst decides on


def burst(api) -> None:
    _, as_of = dry_run_state()  # the state the burst is answered on: read before any of it
    client = api("alice")
    answers = []
    for _ in range(4):
        response = client.post("/api/v1/jobs/", EIGHT, format="json")
        assert response.status_code == 201, response.json()
        answers.append(response.json())
    checks = [a["check"] for a in answers]
    assert [c["verdict"] for c in checks] == ["runs_now", "runs_now", "waits", "waits"]
    a100 = {n.name for n in SimulatedCluster(speedup=SPEEDUP).nodes() if n.gpu_model == "A100-80GB"}
    assert len(a100) == 2
    assert {c["placements"][0]["node"] for c in checks[:2]} == a100
    assert [c["position"] for c in checks[2:]] == [1, 2]
    # By hand: the first two start at the state's time and run 3600 s / SPEEDUP; the third starts then.
    run_s = RUNTIME_S / SPEEDUP
    assert at(checks[2]["estimated_start_p50"]) == pytest.approx(as_of.timestamp() + run_s, abs=0.01)
    assert at(checks[3]["estimated_start_p50"]) == pytest.approx(as_of.timestamp() + run_s, abs=0.01)
    # A check after the burst sees all four: third in its queue, after a second round of runs.
    after = client.post("/api/v1/jobs/check/", EIGHT, format="json").json()
    assert (after["verdict"], after["position"]) == ("waits", 3)
    assert at(after["estimated_start_p50"]) == pytest.approx(as_of.timestamp() + 2 * run_s, abs=0.01)
    # The next cycle agrees: the first two admitted, the others pending in that order, the third
    # estimated to start one runtime after the cycle (it admits the first two then).
    cycle_run(backend=SimulatedCluster(speedup=SPEEDUP))
    jobs = [Job.objects.get(pk=a["id"]) for a in answers]
    assert [j.state for j in jobs] == [JobState.ADMITTED, JobState.ADMITTED, JobState.PENDING, JobState.PENDING]
    assert [j.queue_position for j in jobs[2:]] == [1, 2]
    admitted_at, estimated = jobs[0].admitted_at, jobs[2].estimated_start
    assert admitted_at is not None
    assert estimated is not None
    assert estimated.timestamp() == pytest.approx(admitted_at.timestamp() + run_s, abs=1.0)


def two_submitted_then(api, **first_changes) -> dict:
    """Two 8-GPU jobs submitted after the state was read, the first's row changed as given; then a
    check of a third."""
    dry_run_state()
    client = api("alice")
    for _ in range(2):
        assert client.post("/api/v1/jobs/", EIGHT, format="json").status_code == 201
    first = Job.objects.order_by("created_at").first()
    assert first is not None
    Job.objects.filter(pk=first.pk).update(**first_changes)
    return client.post("/api/v1/jobs/check/", EIGHT, format="json").json()


def test_a_later_job_admitted_since_still_holds_its_room_while_the_older_state_answers(api, world):
    # A newer cycle admitted the first (as a web process may see it before it obtains that cycle's
    # state): still counted, so both A100 nodes are taken and the request waits first in its queue.
    check = two_submitted_then(api, state=JobState.ADMITTED)
    assert (check["verdict"], check["position"]) == ("waits", 1)


def test_a_later_job_in_its_back_off_is_not_counted(api, world):
    # Requeued with a back-off (its pods never ran): no cycle decides it until the back-off ends, so
    # the second takes one node and the other is free.
    check = two_submitted_then(api, not_before=timezone.now() + timedelta(minutes=5))
    assert check["verdict"] == "runs_now"
