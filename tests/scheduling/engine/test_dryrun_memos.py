"""What a dry run's checks remember on one state answers as if made afresh: the forecast's queue of the
waiting jobs made once (``estimate.Forecast.run``'s ``fixed``), each period's expected submissions
added a group at a time (``Forecast.period_plan``), and a replay's walks and decisions
(``timeline.Replay.walked``, ``Replay.decided``)."""

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


def a_state(seed: int, submitted: int, reserved: int) -> DryRun:
    """A cycle's final state whose forecast expects ``submitted`` submissions early in the next hour
    (the largest pending jobs again) and keeps ``reserved`` backfill reservations."""
    snap = build(48, 160, 6, 0.6, seed)
    return DryRun(largest_expected_again(snap, submitted, NOW), Policy(seed=seed, reserved_jobs=reserved), NOW)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    picks=st.lists(st.integers(0, 10**6), min_size=2, max_size=4),
    submitted=st.sampled_from((0, 8, 40)),
    reserved=st.sampled_from((0, 2)),
)
def test_the_forecast_with_its_queue_made_once_starts_every_job_as_with_its_queue_made_afresh(
    seed, picks, submitted, reserved
):
    dry = a_state(seed, submitted, reserved)
    cycle = dry.cycle
    pending = [w for w, _ in cycle.waiting] or [w for w in dry.snapshot.workloads if w.state == WorkloadState.PENDING]
    later: list[tuple[object, str]] = []
    for k, pick in enumerate(picks):
        template = pending[pick % len(pending)]
        candidate = replace(template, id=f"new-{k}", created_at=NOW + 1 + k)
        cq = cycle.lq_by_name[candidate.local_queue].cluster_queue
        waiting = [*cycle.waiting, *later, (candidate, cq)]
        for which in (P50, P90):
            kept = cycle.forecast(waiting, which, until=candidate.id, fixed=len(waiting) - 1)
            assert kept == cycle.forecast(waiting, which, until=candidate.id)
            assert cycle.forecast(waiting, which, fixed=len(waiting) - 1) == cycle.forecast(waiting, which)
        later.append((replace(candidate, id=f"later-{k}"), cq))  # the next check's waiting list: one more
    assert cycle._forecast is not None
    assert cycle._forecast.base_queues  # made once, copied by the next runs
    # Another list of waiting jobs (a new copy's, or one fewer): made again, the same starts.
    fewer = [*cycle.waiting, *later[1:]]
    assert cycle.forecast(fewer, P50, fixed=len(fewer)) == cycle.forecast(fewer, P50)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    picks=st.lists(
        st.tuples(st.integers(0, 10**6), st.sampled_from((-1, 0, 1)), st.sampled_from((0.0, 1.0, 650.0, 4000.0))),
        min_size=2,
        max_size=5,
    ),
    submitted=st.sampled_from((0, 8, 40)),
    reserved=st.sampled_from((0, 2)),
)
def test_a_replay_that_remembers_its_walks_and_decisions_answers_as_a_fresh_replay(seed, picks, submitted, reserved):
    """Jobs of a few shapes, submitted at times that order them before, among and after the expected
    submissions (whose order keys may tie with theirs up to the submission time)."""
    dry = a_state(seed, submitted, reserved)
    cycle = dry.cycle
    pending = [w for w in dry.snapshot.workloads if w.state == WorkloadState.PENDING]
    for which in (P50, P90):
        kept = dry._replays[which]
        for k, (pick, shift, after) in enumerate(picks):
            template = pending[pick % min(6, len(pending))]
            candidate = replace(template, id="dry-run", created_at=NOW + after, priority=template.priority + shift)
            cq = cycle.lq_by_name[candidate.local_queue].cluster_queue
            assert kept.start(candidate, cq) == cycle.replay(which).start(candidate, cq), k
            assert kept.start(candidate, cq) == cycle.replay(which).start(candidate, cq), k  # remembered
        assert kept.walked  # the walks were remembered (and the second start of each job took its own)
