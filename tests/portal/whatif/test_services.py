from __future__ import annotations

from datetime import timedelta

import pytest

from portal.jobs.errors import ServiceError
from portal.jobs.models import JobAttempt
from portal.whatif.models import WhatIfRun
from portal.whatif.start import whatif_start
from scheduling.adapters.history import base_snapshot_load, history_load
from scheduling.adapters.simulated import SimulatedCluster
from scheduling.selectors import policy_from_settings
from scheduling.sim.figures import admission_differences
from scheduling.sim.history import replay_history
from tests.factories import build_world
from tests.portal.whatif.conftest import T0, TICK_S, record_history, submissions

pytestmark = pytest.mark.django_db


def replay_today(start, end):
    history = history_load(start=start, end=end)
    base = base_snapshot_load(backend=SimulatedCluster(speedup=1.0))
    run = replay_history(
        base,
        history.jobs,
        policy_from_settings(),
        start_s=start.timestamp(),
        end_s=end.timestamp(),
        preempt_delay_s=TICK_S,
    )
    return history, run


@pytest.mark.parametrize("seed", [1, 2])
def test_replaying_with_todays_settings_reproduces_every_recorded_admission(tick_settings, seed):
    # One A100 node (8 GPUs) shared by two teams of a cohort, 4 nominal each: they borrow, reclaim
    # (preempt) and queue.
    world = build_world(a100_nodes=1, t4_nodes=0, nominal_a100=4)
    end = record_history(world, submissions(seed), ticks=100)
    assert JobAttempt.objects.filter(admitted_at__gt=T0 + timedelta(seconds=TICK_S)).count() >= 20
    waited = [a for a in JobAttempt.objects.all() if a.admitted_at > a.queued_at]
    assert waited, "the scenario has contention"

    history, run = replay_today(T0, end)

    assert admission_differences(history.recorded, run.attempts, tolerance_s=0) == []
    recorded = sorted((a.job_id, a.admitted_s, a.gpu_model, a.gpu_share_7000ths) for a in history.recorded)
    replayed = sorted((a.job_id, a.admitted_s, a.gpu_model, a.gpu_share_7000ths) for a in run.attempts)
    assert replayed == recorded


def test_a_window_that_starts_mid_history_reproduces_the_admissions_inside_it(tick_settings):
    world = build_world(a100_nodes=1, t4_nodes=0, nominal_a100=4)
    end = record_history(world, submissions(3), ticks=100)
    start = T0 + timedelta(seconds=40 * TICK_S)  # jobs running and waiting at the start

    history, run = replay_today(start, end)

    inside = [a for a in history.recorded if a.admitted_s >= start.timestamp()]
    assert len(inside) >= 10
    replayed = [a for a in run.attempts if a.admitted_s >= start.timestamp()]
    assert admission_differences(inside, replayed, tolerance_s=0) == []


def test_the_scenario_reclaims_borrowed_quota_so_the_replay_covers_preemption(tick_settings):
    world = build_world(a100_nodes=1, t4_nodes=0, nominal_a100=4)
    record_history(world, submissions(1), ticks=100)
    assert JobAttempt.objects.filter(requeued=True).exists()


def test_shrinking_a_teams_quota_makes_its_jobs_wait_longer_and_gives_the_other_team_more_gpu_hours(
    tick_settings, django_capture_on_commit_callbacks
):
    world = build_world(a100_nodes=1, t4_nodes=0, nominal_a100=4)
    end = record_history(world, submissions(1), ticks=100)
    change = {"cluster_queues": {"cq-nlp": {"flavors": {"A100-80GB": {"nominal_gpus": 1, "borrowing_limit": 0}}}}}
    with django_capture_on_commit_callbacks(execute=True):
        run = whatif_start(user=world.users["admin"], changes=change, window_from=T0, window_to=end)
    run.refresh_from_db()

    assert run.status == WhatIfRun.Status.DONE, run.error
    result = run.result
    assert result["check"]["differ"] == 0  # the baseline reproduces history
    recorded, whatif = result["recorded"], result["whatif"]
    assert whatif["nlp"]["wait_p90_s"] > recorded["nlp"]["wait_p90_s"]
    assert whatif["nlp"]["wait_p50_s"] >= recorded["nlp"]["wait_p50_s"]
    assert whatif["vision"]["wait_p50_s"] <= recorded["vision"]["wait_p50_s"]
    assert whatif["vision"]["gpu_hours"] >= recorded["vision"]["gpu_hours"]
    assert whatif["nlp"]["gpu_hours"] < recorded["nlp"]["gpu_hours"]
    assert run.progress == 1.0


def test_a_team_admin_may_change_only_their_own_teams_weight(tick_settings):
    world = build_world(a100_nodes=1, t4_nodes=0, nominal_a100=4)
    alice = world.users["alice"]  # team admin of vision
    end = T0 + timedelta(hours=1)
    with pytest.raises(ServiceError) as denied:
        whatif_start(
            user=alice, changes={"local_queues": {"nlp/default": {"weight": 3}}}, window_from=T0, window_to=end
        )
    assert denied.value.status_code == 403
    assert denied.value.field == "local_queues.nlp/default"
    with pytest.raises(ServiceError) as quota:
        whatif_start(
            user=alice, changes={"cluster_queues": {"cq-vision": {"weight": 2}}}, window_from=T0, window_to=end
        )
    assert quota.value.status_code == 403
    run = whatif_start(
        user=alice, changes={"local_queues": {"vision/default": {"weight": 3}}}, window_from=T0, window_to=end
    )
    assert run.changes == {"local_queues": {"vision/default": {"weight": 3.0}}}


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"placement": "worst"}, "placement"),
        ({"cluster_queues": {"nope": {}}}, "cluster_queues.nope"),
        (
            {"cluster_queues": {"cq-nlp": {"flavors": {"H100": {"nominal_gpus": 1}}}}},
            "cluster_queues.cq-nlp.flavors.H100",
        ),
        (
            {"cluster_queues": {"cq-nlp": {"flavors": {"A100-80GB": {"nominal_gpus": -1}}}}},
            "cluster_queues.cq-nlp.flavors.A100-80GB.nominal_gpus",
        ),
        ({"cluster_queues": {"cq-nlp": {"weight": "x"}}}, "cluster_queues.cq-nlp.weight"),
        ({"bogus": 1}, "changes.bogus"),
    ],
)
def test_a_bad_change_is_refused_naming_the_field(world, changes, field):
    with pytest.raises(ServiceError) as refused:
        whatif_start(user=world.users["admin"], changes=changes, window_from=T0, window_to=T0 + timedelta(hours=1))
    assert refused.value.field == field
    assert refused.value.status_code == 400


def test_a_jobs_demand_is_its_hold_from_admission_and_its_pods_lag_is_kept(tick_settings):
    # On Kubernetes pods run some seconds after admission (image pull, binding); quota and devices are
    # held from admission, so the replay holds them for admission -> end and bills from the pods' start.
    world = build_world(a100_nodes=1, t4_nodes=0, nominal_a100=4)
    end = record_history(world, submissions(1), ticks=100)
    attempt = JobAttempt.objects.filter(ended_at__isnull=False, requeued=False).order_by("pk").first()
    JobAttempt.objects.filter(pk=attempt.pk).update(started_at=attempt.admitted_at + timedelta(seconds=30))
    loaded = {j.workload.id: j for j in history_load(start=T0, end=end).jobs}[str(attempt.job_id)]
    assert loaded.run_s == (attempt.ended_at - attempt.admitted_at).total_seconds()
    assert loaded.start_lag_s == 30.0
