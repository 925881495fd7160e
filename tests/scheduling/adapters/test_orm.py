"""``scheduling.adapters.orm``: a job's placement rules, the pools and the team allow-list reach the
snapshot; rules are read once per job, an edited row is read again, a corrupt one runs nowhere."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from portal.jobs.models import Job, JobAttempt
from portal.jobs.states import JobState
from portal.tenants.models import TolerationGrant
from scheduling.adapters import orm, workloads
from scheduling.adapters.simulated import SimulatedCluster
from scheduling.engine.model import NodePool as EnginePool
from scheduling.engine.model import NodeSelectorTerm, PlacementRules, Requirement
from scheduling.engine.model import TolerationGrant as EngineGrant
from scheduling.models import NodePool
from scheduling.selectors import policy_from_settings, snapshot_for_cycle
from scheduling.services import cycle_run

pytestmark = pytest.mark.django_db

REQ = "requiredDuringSchedulingIgnoredDuringExecution"
A100 = {
    "nodeAffinity": {
        REQ: {"nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100"]}]}]}
    }
}


def workload(snapshot, job):
    return next(w for w in snapshot.workloads if w.id == str(job.pk))


@pytest.fixture(autouse=True)
def _queue_jobs_no_node_matches(settings):
    settings.QUEUE_NEVER_FITTING_JOBS = True  # these jobs' affinity matches no node of the test cluster


def test_rules_pools_and_grants_reach_the_snapshot(world, settings):
    job = world.submit(gpu=1, affinity=A100, required_topology="rack")
    plain = world.submit(gpu=1)
    NodePool.objects.create(
        name="shared", node_selector={"pool": "shared"}, placement="spread", overcommit_ratio=Decimal("1.25")
    )
    TolerationGrant.objects.create(team=world.teams["vision"], key="spot", effect="NoSchedule")
    snapshot = orm.snapshot_load(backend=SimulatedCluster())
    assert workload(snapshot, job).rules == PlacementRules(
        required_terms=(NodeSelectorTerm((Requirement("gpu", "In", ("a100",)),)),), required_topology="rack"
    )
    assert workload(snapshot, plain).rules is None
    assert snapshot.pools == (EnginePool("shared", (("pool", "shared"),), "spread", 1.25),)
    # Every team may tolerate the spot taint (``spot: true``); other taints only when granted.
    spot = EngineGrant(settings.SPOT_TAINT_KEY)
    assert dict(snapshot.toleration_grants or ()) == {
        "nlp": (spot,),
        "vision": (EngineGrant("spot", "", "NoSchedule"), spot),
    }


def test_an_edited_row_is_read_again_and_a_corrupt_one_matches_no_node(world):
    job = world.submit(gpu=1, affinity=A100)
    orm.snapshot_load(backend=SimulatedCluster())
    job.affinity = {
        "nodeAffinity": {
            REQ: {"nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "Gt", "values": ["x"]}]}]}
        }
    }
    job.save()  # as the admin saves it: around the submit path's checks
    rules = workload(orm.snapshot_load(backend=SimulatedCluster()), job).rules
    assert rules == PlacementRules(required_terms=())
    # A queryset update does not move updated_at: the rules read before still hold (they never change).
    Job.objects.filter(pk=job.pk).update(message="x")
    assert workload(orm.snapshot_load(backend=SimulatedCluster()), job).rules == rules


_TOLERATION = st.one_of(
    st.fixed_dictionaries(
        {"key": st.sampled_from(["spot", "dedicated"]), "operator": st.just("Exists")},
        optional={"effect": st.sampled_from(["", "NoSchedule"])},
    ),
    st.fixed_dictionaries(
        {"key": st.sampled_from(["spot", "gpu"])},
        optional={"operator": st.just("Equal"), "value": st.sampled_from(["", "true"]), "effect": st.just("NoExecute")},
    ),
)
_JOB = st.fixed_dictionaries(
    {
        "team": st.sampled_from(["vision", "nlp"]),
        "priority": st.sampled_from(["low", "default", "critical"]),
        "shape": st.sampled_from([{"gpu": 1}, {"gpu": 2}, {"gpu_milli": 250}, {"mig_profile": "1g.10gb"}]),
        "replicas": st.integers(1, 3),
        "allowed": st.sampled_from([(), ("A100-80GB",), ("T4", "A100-80GB")]),
        "node_selector": st.dictionaries(
            st.sampled_from(["zone", "karpenter.sh/capacity-type"]), st.sampled_from(["a", "on-demand"]), max_size=2
        ),
        "tolerations": st.lists(_TOLERATION, max_size=3),
        "affinity": st.sampled_from([{}, A100]),
        "required_topology": st.sampled_from(["", "node"]),
        "runtime_s": st.integers(60, 7200),
        "spot": st.booleans(),
        "window": st.sampled_from(
            [{}, {"off_peak": True}, {"start_window": "22:00-06:00", "window_timezone": "Europe/Paris"}]
        ),
    }
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(jobs=st.lists(_JOB, min_size=1, max_size=5), cycles=st.integers(0, 2))
def test_the_snapshot_rows_agree_with_the_model_instance_path(world, jobs, cycles):
    """The snapshot builds workloads from plain rows (``workload_from_row``); a single job is built from
    its model instance (``workload_from_job``). For any mix of jobs, pending, admitted and running
    with their placements, both give the same workload."""
    for team in world.teams.values():
        TolerationGrant.objects.get_or_create(team=team, all_taints=True)
    for job in jobs:
        shape = job["shape"]
        world.submit(
            team=job["team"],
            priority_class=world.priorities[job["priority"]],
            replicas=job["replicas"],
            min_available=job["replicas"],
            allowed_gpu_models=tuple(world.models[name] for name in job["allowed"]),
            node_selector=tuple(sorted(job["node_selector"].items())),
            tolerations=tuple(job["tolerations"]),
            affinity=job["affinity"],
            required_topology=job["required_topology"],
            runtime_s=job["runtime_s"],
            spot=job["spot"],
            **job["window"],
            gpu=shape.get("gpu", 0),
            gpu_milli=shape.get("gpu_milli", 0),
            mig_profile=shape.get("mig_profile", ""),
        )
    backend = SimulatedCluster()
    for _ in range(cycles):
        cycle_run(backend=backend)
    snapshot = orm.snapshot_load(backend=backend)
    live = Job.objects.filter(state__in=["Pending", "Admitted", "Running"])
    assert {w.id for w in snapshot.workloads} == {str(pk) for pk in live.values_list("pk", flat=True)}
    for job in live:
        placements = list(job.placements.order_by("replica"))
        assert workload(snapshot, job) == workloads.workload_from_job(job, placements)


def test_the_cycle_snapshot_carries_the_last_periods_submissions_in_any_state_with_runtimes(world):
    now = timezone.now()
    period = timedelta(seconds=policy_from_settings().arrival_period_s)
    old, done, waiting = world.submit(gpu=1), world.submit(gpu=2), world.submit(gpu=1)
    Job.objects.filter(pk=old.pk).update(created_at=now - period - timedelta(minutes=1))
    Job.objects.filter(pk=done.pk).update(created_at=now - period + timedelta(minutes=1), state=JobState.SUCCEEDED)
    snapshot = snapshot_for_cycle(backend=SimulatedCluster(), now=now)
    recent = {w.id: w for w in snapshot.recent}
    assert set(recent) == {str(done.pk), str(waiting.pk)}
    assert recent[str(done.pk)].resources.gpu == 2
    assert {w.state.value for w in recent.values()} == {"pending"}
    assert {str(done.pk), str(waiting.pk)} <= {wid for wid, _, _ in snapshot.runtimes}


def test_the_cycle_snapshot_carries_a_running_jobs_runtime_given_how_long_it_has_run(world):
    # Five finished runs of the team that asked for 3600 s ran 1000 ... 5000 s; a job asking for 3600 s
    # has run 2500 s. Plain (runtimes): P50 3000, P90 4000 + 0.6 * 1000 = 4600. Given the 2500 s it ran
    # (halfway between the 2nd and 3rd of five runs: F = 1.5 / 4 = 0.375): P50 at F 0.375 + 0.5 * 0.625
    # = 0.6875 (2.75 of 4 steps: 3750), P90 at F 0.375 + 0.9 * 0.625 = 0.9375 (3.75 steps: 4750).
    now = timezone.now()
    for k, ran in enumerate((1000, 2000, 3000, 4000, 5000)):
        done = world.submit(gpu=1, runtime_s=3600)
        start = now - timedelta(days=1, seconds=k * 10_000)
        Job.objects.filter(pk=done.pk).update(state=JobState.SUCCEEDED)
        JobAttempt.objects.create(
            job=done, number=1, queued_at=start, admitted_at=start, started_at=start,
            ended_at=start + timedelta(seconds=ran), outcome=JobState.SUCCEEDED,
        )  # fmt: skip
    job = world.submit(gpu=1, runtime_s=3600)
    cycle_run(backend=SimulatedCluster())
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, started_at=now - timedelta(seconds=2500))
    snapshot = snapshot_for_cycle(backend=SimulatedCluster(), now=now)
    running = {wid: (p50, p90) for wid, p50, p90 in snapshot.running_runtimes}
    plain = {wid: (p50, p90) for wid, p50, p90 in snapshot.runtimes}
    assert running[str(job.pk)] == pytest.approx((3750, 4750))
    assert plain[str(job.pk)] == pytest.approx((3000, 4600))
