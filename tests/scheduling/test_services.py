"""``scheduling.services``: the cycle in-process (submit → engine → simulated cluster → metered), one cycle
at a time across workers (the advisory lock), the fence that keeps a stale plan from being written, and the
sweeper: an admitted job whose pods never run is requeued with an exponential back-off and an attempt limit
(then Failed with the reason); the quota it held is shown and counted per queue."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from django.test import TestCase
from django.utils import timezone

from billing.models import UsageRecord
from billing.services import metering_run
from portal.jobs.models import Job
from portal.jobs.services import job_cancel
from portal.jobs.states import JobState
from scheduling import services
from scheduling.adapters import apply, orm
from scheduling.adapters.apply import LostCycleLock
from scheduling.adapters.contract import Observation
from scheduling.adapters.simulated import SimulatedCluster
from scheduling.engine.cycle import run_cycle
from scheduling.models import CycleRun, SimNode
from scheduling.services import (
    CYCLE_LOCK_KEY,
    cycle_lock,
    cycle_lock_held,
    cycle_run,
    jobs_sweep,
    policy_from_settings,
)
from tests.scheduling.helpers import other_session

pytestmark = pytest.mark.django_db


def states(*jobs):
    for job in jobs:
        job.refresh_from_db()
    return [job.state for job in jobs]


def test_a_job_goes_pending_admitted_running_succeeded_and_is_metered(world):
    backend = SimulatedCluster(speedup=60)
    job = world.submit(gpu=2, runtime_s=3600)
    t0 = timezone.now()
    cycle_run(now=t0, backend=backend)
    assert states(job) == [JobState.ADMITTED]
    placement = list(job.placements.values_list("node", "gpu_indices"))
    assert len(placement) == 1
    assert len(placement[0][1]) == 2

    cycle_run(now=t0 + timedelta(seconds=1), backend=backend)
    assert states(job) == [JobState.RUNNING]
    assert job.started_at == t0  # the simulated cluster starts pods at admission time

    cycle_run(now=t0 + timedelta(seconds=61), backend=backend)  # 3600 s at 60x = 60 s
    assert states(job) == [JobState.SUCCEEDED]
    assert job.finished_at == t0 + timedelta(seconds=60)
    assert not job.placements.exists()

    assert metering_run() == 1
    record = UsageRecord.objects.get(job=job)
    assert record.gpu_model == "A100-80GB"
    assert record.gpu_seconds == Decimal("120.000000")  # 2 GPUs for 60 s
    assert record.capacity_type == "on-demand"
    assert metering_run() == 0  # idempotent
    assert UsageRecord.objects.count() == 1


def test_quota_holds_back_jobs_beyond_the_nominal_and_borrowable_gpus(world):
    # Each cluster queue has 8 A100s nominal in a cohort of two; a100 nodes: 2 x 8 GPUs.
    jobs = [world.submit(gpu=8, allowed_gpu_models=(world.models["A100-80GB"],)) for _ in range(3)]
    cycle_run(now=timezone.now(), backend=SimulatedCluster())
    assert states(*jobs) == [JobState.ADMITTED, JobState.ADMITTED, JobState.PENDING]
    waiting = jobs[2]
    assert waiting.pending_reason["kind"] in {"quota", "placement"}
    assert waiting.pending_reason["message"]
    assert waiting.queue_position == 1


def test_higher_priority_goes_first(world):
    low = world.submit(gpu=8, priority_class=world.priorities["low"], allowed_gpu_models=(world.models["A100-80GB"],))
    high = world.submit(gpu=8, priority_class=world.priorities["critical"])
    blocker = world.submit("nlp", gpu=8, allowed_gpu_models=(world.models["A100-80GB"],))
    cycle_run(now=timezone.now(), backend=SimulatedCluster())
    assert states(high, blocker, low) == [JobState.ADMITTED, JobState.ADMITTED, JobState.PENDING]


def test_a_fraction_shares_one_device(world):
    a = world.submit(gpu=0, gpu_milli=500, allowed_gpu_models=(world.models["T4"],))
    b = world.submit(gpu=0, gpu_milli=500, allowed_gpu_models=(world.models["T4"],))
    cycle_run(now=timezone.now(), backend=SimulatedCluster())
    assert states(a, b) == [JobState.ADMITTED, JobState.ADMITTED]
    pa, pb = a.placements.get(), b.placements.get()
    assert pa.gpu_milli == pb.gpu_milli == 500
    assert len(pa.gpu_indices) == len(pb.gpu_indices) == 1


def test_cancelling_a_running_job_frees_its_gpus_for_the_next_cycle(world):
    # One T4 node with 4 GPUs: both jobs are within their queues' nominal quota, only one fits the node.
    backend = SimulatedCluster()
    t4 = (world.models["T4"],)
    first = world.submit("vision", gpu=4, allowed_gpu_models=t4)
    second = world.submit("nlp", gpu=4, allowed_gpu_models=t4)
    t0 = timezone.now()
    cycle_run(now=t0, backend=backend)
    assert states(first, second) == [JobState.ADMITTED, JobState.PENDING]
    assert second.pending_reason["kind"] == "placement"
    job_cancel(job=first, by=world.users["alice"])
    cycle_run(now=t0 + timedelta(seconds=1), backend=backend)
    assert states(first, second) == [JobState.CANCELLED, JobState.ADMITTED]
    assert second.placements.get().node == "t4-0"


def test_each_cycle_is_recorded(world):
    world.submit(gpu=1)
    cycle_run(now=timezone.now(), backend=SimulatedCluster())
    run = CycleRun.objects.get()
    assert run.admitted == 1
    assert run.total_gpus == 20
    assert run.allocated_gpus == 1.0


@pytest.mark.parametrize(
    "policy", ["binpack", "spread", "portal", "fgd", "random", "dotprod", "clustering", "packing", "bestfit"]
)
def test_every_placement_policy_is_selectable_through_settings(world, settings, policy):
    settings.PLACEMENT_POLICY = policy
    SimNode.objects.filter(name="a100-1").update(mig_enabled=True)  # MIG slices only on MIG-mode devices
    jobs = [
        world.submit(gpu=0, gpu_milli=500, allowed_gpu_models=(world.models["T4"],)),
        world.submit(gpu=2),
        world.submit("nlp", gpu=1, replicas=2),
        world.submit("nlp", gpu=0, mig_profile="3g.40gb", allowed_gpu_models=(world.models["A100-80GB"],)),
    ]
    cycle_run(now=timezone.now(), backend=SimulatedCluster())
    assert states(*jobs) == [JobState.ADMITTED] * 4, [j.pending_reason for j in jobs]
    assert jobs[3].placements.get().node == "a100-1"


def test_gpus_allocated_counts_whole_gpus_fractions_and_mig_slices_by_share(world):
    from portal.jobs.selectors import gpus_allocated

    SimNode.objects.filter(name="a100-1").update(mig_enabled=True)
    world.submit(gpu=1, allowed_gpu_models=(world.models["A100-80GB"],))
    world.submit(gpu=0, gpu_milli=500, allowed_gpu_models=(world.models["T4"],))
    world.submit(gpu=0, mig_profile="3g.40gb", allowed_gpu_models=(world.models["A100-80GB"],))
    assert gpus_allocated() == 0
    cycle_run(now=timezone.now(), backend=SimulatedCluster())
    assert gpus_allocated() == pytest.approx(1 + 0.5 + 3 / 7, abs=1e-6)


def test_a_cycle_is_skipped_while_another_worker_holds_the_lock(world):
    job = world.submit(gpu=1)
    with other_session() as other:
        other.execute("SELECT pg_advisory_lock(%s)", [CYCLE_LOCK_KEY])
        assert cycle_run(now=timezone.now(), backend=SimulatedCluster()) is None
        other.execute("SELECT pg_advisory_unlock(%s)", [CYCLE_LOCK_KEY])
    assert Job.objects.get(pk=job.pk).state == JobState.PENDING
    assert cycle_run(now=timezone.now(), backend=SimulatedCluster()) is not None
    assert Job.objects.get(pk=job.pk).state == JobState.ADMITTED


def test_the_lock_holder_is_named_in_pg_stat_activity(world):
    with cycle_lock() as acquired, other_session() as other:
        assert acquired
        holder = other.execute(
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted AND a.datname = current_database()"
        ).fetchone()
        assert holder[0].startswith("gpu-portal cycle pid=")
        assert cycle_lock_held()
    assert not cycle_lock_held()


def test_a_plan_is_not_written_once_the_lock_is_lost(world):
    job = world.submit(gpu=1)
    backend = SimulatedCluster()
    snapshot = orm.snapshot_load(backend=backend)
    plan = run_cycle(snapshot, policy_from_settings(), timezone.now().timestamp())
    assert plan.admissions
    with pytest.raises(LostCycleLock):
        apply.plan_apply(plan=plan, snapshot=snapshot, now=timezone.now(), backend=backend, fence=lambda: False)
    assert Job.objects.get(pk=job.pk).state == JobState.PENDING


pytestmark = pytest.mark.django_db


class PodsNeverRun(SimulatedCluster):
    """The simulated cluster, except that no pod ever starts (an image that never pulls)."""

    def observe(self, *, now: datetime) -> list[Observation]:
        return []


def cycle(at: datetime) -> None:
    with TestCase.captureOnCommitCallbacks(execute=True):
        cycle_run(now=at, backend=PodsNeverRun())


def sweep(at: datetime) -> int | None:
    with TestCase.captureOnCommitCallbacks(execute=True):
        return jobs_sweep(now=at, backend=PodsNeverRun())


def test_a_job_whose_pods_never_run_backs_off_exponentially_then_fails_with_the_reason(world, settings, api):
    settings.ADMITTED_TIMEOUT_S = 600
    settings.ADMITTED_BACKOFF_BASE_S = 60
    settings.ADMITTED_REQUEUE_LIMIT = 2
    job = world.submit(gpu=2)
    t = timezone.now()
    backoffs = []
    for failure in (1, 2):
        cycle(t)
        job.refresh_from_db()
        assert job.state == JobState.ADMITTED, (failure, job.message)
        t += timedelta(seconds=601)
        assert sweep(t) == 1
        job.refresh_from_db()
        assert job.state == JobState.PENDING
        assert job.start_failures == failure
        assert job.pending_reason["kind"] == "backoff"
        backoff = (job.not_before - t).total_seconds()
        backoffs.append(backoff)
        cycle(t + timedelta(seconds=backoff - 1))  # still in its back-off: not admitted
        job.refresh_from_db()
        assert job.state == JobState.PENDING
        t += timedelta(seconds=backoff + 1)
    assert backoffs == [60, 120]
    cycle(t)
    t += timedelta(seconds=601)
    sweep(t)
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert "pods not running 600 s after admission (3 times); not retried" in job.message
    assert job.quota_held_s == pytest.approx(3 * 601, abs=1)
    body = api("alice").get(f"/api/v1/jobs/{job.pk}/").json()
    assert body["start_failures"] == 3
    assert body["quota_held_s"] == pytest.approx(3 * 601, abs=1)
    assert "backoff_s" in Job.objects.get(pk=job.pk).transitions.filter(to_state="Pending").last().detail


def test_a_job_that_must_not_be_requeued_fails_at_its_first_failed_start(world, settings):
    settings.ADMITTED_TIMEOUT_S = 600
    job = world.submit(gpu=1, restart_policy=Job.RestartPolicy.NEVER)
    t = timezone.now()
    cycle(t)
    sweep(t + timedelta(seconds=601))
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert "(once); not retried" in job.message


def test_the_held_quota_is_counted_per_queue_in_the_metrics_and_shown_on_the_job_page(world, settings, client):
    settings.ADMITTED_TIMEOUT_S = 600
    settings.METRICS_TOKEN = "m"
    job = world.submit(gpu=1)
    t = timezone.now()
    cycle(t)
    sweep(t + timedelta(seconds=601))
    body = client.get("/metrics", headers={"Authorization": "Bearer m"}).content.decode()
    assert 'portal_pods_ready_timeouts_total{cluster_queue="cq-vision"} 1.0' in body
    assert 'portal_quota_held_without_running_seconds_total{cluster_queue="cq-vision"} 601' in body
    assert 'portal_backoff_workloads{cluster_queue="cq-vision"} 1.0' in body
    client.force_login(world.users["alice"])
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "quota held 601 s without running" in page


@pytest.mark.parametrize(
    ("started_ago_s", "spacing_s", "expected_s"),
    [
        (None, None, 1.0),  # no cycle yet: the batch delay
        (0.2, 0.5, 1.0),  # a cheap last cycle: the batch delay
        (0.5, 3.0, 2.5),  # a costly one: until its start plus its spacing
        (0.5, 60.0, 10.0),  # never past beat's interval
        (30.0, 3.0, 1.0),  # long ago
    ],
)
def test_a_requested_cycle_waits_the_batch_delay_or_the_last_cycles_spacing(
    settings, started_ago_s, spacing_s, expected_s
):
    settings.CYCLE_BATCH_S, settings.SCHEDULER_INTERVAL_S = 1.0, 10.0
    now_s = 1_000_000.0
    started_s = None if started_ago_s is None else now_s - started_ago_s
    countdown = services.cycle_request_countdown(started_s=started_s, spacing_s=spacing_s, now_s=now_s)
    assert countdown == pytest.approx(expected_s)


def test_a_finished_cycle_sets_the_next_requested_ones_spacing_from_its_duration(world, cycle_keys, settings):
    settings.CYCLE_REQUEST_SHARE = 0.25
    before = time.time()
    run = cycle_run(now=timezone.now(), backend=SimulatedCluster())
    state = cycle_keys.hgetall(services.cycle_key(services.CYCLE_STATE_KEY))
    assert int(state[b"started"]) == int(state[b"done"]) == 1
    assert before <= float(state[b"started_s"]) <= time.time()
    # At least the recorded duration over the share (the spacing also counts the record's own write).
    assert float(state[b"spacing_s"]) >= run.duration_ms / 1000 / 0.25
    assert float(state[b"spacing_s"]) < 4 * (time.time() - before) + 0.01
