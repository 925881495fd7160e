"""The dry run's replay of the cycle's recorded forecast (scheduling.engine.timeline): the start it gives
one more job is the forecast run again with that job among the waiting ones (the general path), on
worlds shaped like bench_cycle's (gangs, fractions, MIG slices, CPU-only work, several queues)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.bench_cycle import build
from scheduling.engine.dryrun import DryRun
from scheduling.engine.estimate import P50, P90
from scheduling.engine.model import Policy, WorkloadState

from .builders import largest_expected_again

NOW = 5000.0


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    jobs=st.sampled_from((24, 160)),  # 24: every waiting job starts within the record, the replay goes past it
    picks=st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from((-1, 0, 1))), min_size=1, max_size=6),
    decisions=st.sampled_from((30, 300, 3000)),
    placement=st.sampled_from(("portal", "binpack")),
    reserved=st.sampled_from((0, 1, 4)),  # backfill reservations (the forecast keeps the cycle's)
)
def test_a_replayed_start_is_the_forecast_run_again_with_the_job_waiting(
    seed, jobs, picks, decisions, placement, reserved
):
    snap = build(48, jobs, 6, 0.6, seed)
    policy = Policy(seed=seed, placement=placement, forecast_decisions=decisions, reserved_jobs=reserved)
    dry = DryRun(snap, policy, NOW)
    cycle = dry.cycle
    pending = [w for w in snap.workloads if w.state == WorkloadState.PENDING]
    for k, (pick, shift) in enumerate(picks):
        template = pending[pick % len(pending)]
        candidate = replace(template, id=f"new-{k}", created_at=NOW, priority=template.priority + shift)
        cq = cycle.lq_by_name[candidate.local_queue].cluster_queue
        for which in (P50, P90):
            replayed = dry._replays[which].start(candidate, cq)
            run_again = cycle.forecast([*cycle.waiting, (candidate, cq)], which, until=candidate.id)
            assert replayed == run_again.get(candidate.id)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    picks=st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from((0, 1))), min_size=1, max_size=4),
    decisions=st.sampled_from((100, 300, 1000)),
    submitted=st.sampled_from((8, 40)),  # submissions early in the last hour: expected again soon
)
def test_a_replayed_start_with_expected_submissions_is_the_forecast_run_again(seed, picks, decisions, submitted):
    """With expected submissions (``forecast_queue.Arrivals``), whose failed decisions the run charges to a
    budget of their own (``estimate.spare_budget``): the replay charges them the same, so where the run
    stopped within its budget (waiting jobs left: the replay never goes past the record, where it adds
    no later period's submissions) it starts the job where the run again would. The submissions repeat
    the largest waiting jobs (they fail at most steps), and so do the jobs checked."""
    snap = build(48, 160, 6, 0.6, seed)
    dry = DryRun(largest_expected_again(snap, submitted, NOW), Policy(seed=seed, forecast_decisions=decisions), NOW)
    cycle = dry.cycle
    assert cycle._arrivals() is not None
    for which in (P50, P90):
        replay = dry._replays[which]
        if not replay.timeline.left:
            continue  # every waiting job started: past the record the replay expects no submissions
        # Large jobs of a shape of their own (one MiB more): decided at every step until they fit, so
        # where the budget runs out decides whether they start.
        largest = sorted((w for w, _ in cycle.waiting), key=lambda w: (-(w.resources.gpu * w.replicas), w.id))
        for k, (pick, shift) in enumerate(picks):
            template = largest[pick % min(8, len(largest))]
            resources = replace(template.resources, memory_mib=template.resources.memory_mib + k + 1)
            candidate = replace(
                template, id=f"new-{k}", created_at=NOW, priority=template.priority + shift, resources=resources
            )
            cq = cycle.lq_by_name[candidate.local_queue].cluster_queue
            run_again = cycle.forecast([*cycle.waiting, (candidate, cq)], which, until=candidate.id)
            assert replay.start(candidate, cq) == run_again.get(candidate.id)


def test_a_forecast_run_again_gives_the_same_starts_mig_slices_included():
    """The forecast undoes what it staged in exactly the reverse order: a MIG job that started and ended
    within one run leaves its slices free (the cycle's final state is as before the forecast)."""
    snap = build(200, 400, 20, 0.5, 1)  # the bench world where the rerun differed before
    assert any(n.mig_enabled for n in snap.nodes)
    cycle = DryRun(snap, Policy(seed=1), NOW).cycle
    assert any(s.placements and s.placements[0].mig_profile for s in cycle.forecasts[P50].values())
    assert cycle.forecast(cycle.waiting, P50) == cycle.forecasts[P50]
    assert cycle.forecast(cycle.waiting, P90) == cycle.forecasts[P90]


def test_replaying_leaves_the_cycle_and_its_answers_unchanged():
    snap = build(60, 200, 6, 0.6, 3)
    dry = DryRun(snap, Policy(seed=3), NOW)
    pending = [w for w in snap.workloads if w.state == WorkloadState.PENDING]
    candidates = [replace(w, id=f"new-{i}", created_at=NOW) for i, w in enumerate(pending[:12])]
    first = [dry.check(c) for c in candidates]
    assert [dry.check(c) for c in reversed(candidates)] == list(reversed(first))  # cursors moved back
    assert dry.cycle.forecast(dry.cycle.waiting, P50) == dry.cycle.forecasts[P50]
