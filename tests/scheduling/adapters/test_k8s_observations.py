"""The pods of an active job attempt as job state changes, at the cluster's times."""

from __future__ import annotations

from datetime import UTC, datetime

from portal.jobs.states import JobState
from scheduling.adapters.k8s.observations import ActiveJob, job_observations
from tests.scheduling.adapters.factories import managed_pod

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def running(at: str) -> dict:
    return {"containerStatuses": [{"name": "main", "state": {"running": {"startedAt": at}}}]}


def finished(start: str, end: str, code: int = 0) -> dict:
    terminated = {"startedAt": start, "finishedAt": end, "exitCode": code, "reason": "Error" if code else "Completed"}
    return {"containerStatuses": [{"name": "main", "state": {"terminated": terminated}}]}


ACTIVE = ActiveJob(job_id=42, attempt=3, state=JobState.ADMITTED, replicas=2, gang_size=2, requeue=True)


def test_a_gang_is_running_when_its_last_pod_starts():
    pods = [
        managed_pod(0, "Running", **running("2026-01-05T09:00:05Z")),
        managed_pod(1, "Running", **running("2026-01-05T09:00:09Z")),
    ]
    (obs,) = job_observations([ACTIVE], pods, {"n1"}, now=T0)
    assert (obs.state, obs.at) == (JobState.RUNNING, datetime(2026, 1, 5, 9, 0, 9, tzinfo=UTC))
    assert job_observations([ACTIVE], pods[:1], {"n1"}, now=T0) == []


def test_a_job_succeeds_when_every_pod_has_and_runs_first_if_never_seen_running():
    pods = [
        managed_pod(0, "Succeeded", **finished("2026-01-05T09:00:05Z", "2026-01-05T10:00:00Z")),
        managed_pod(1, "Succeeded", **finished("2026-01-05T09:00:06Z", "2026-01-05T10:00:30Z")),
    ]
    first, second = job_observations([ACTIVE], pods, {"n1"}, now=T0)
    assert first.state == JobState.RUNNING
    assert (second.state, second.at) == (JobState.SUCCEEDED, datetime(2026, 1, 5, 10, 0, 30, tzinfo=UTC))


def test_a_non_zero_exit_fails_the_job_and_an_eviction_requeues_it():
    crashed = [managed_pod(0, "Failed", **finished("2026-01-05T09:00:05Z", "2026-01-05T09:10:00Z", code=137))]
    (obs,) = job_observations([ACTIVE], crashed, {"n1"}, now=T0)
    assert obs.state == JobState.FAILED
    assert "exit code 137" in obs.reason
    evicted = [managed_pod(0, "Failed", reason="Evicted")]
    (obs,) = job_observations([ACTIVE], evicted, {"n1"}, now=T0)
    assert obs.state == JobState.PENDING
    never = ActiveJob(42, 3, JobState.RUNNING, 2, 2, requeue=False)
    (obs,) = job_observations([never], evicted, {"n1"}, now=T0)
    assert obs.state == JobState.FAILED


def test_pods_on_a_vanished_node_or_gone_from_a_running_job_requeue_it():
    job = ActiveJob(42, 3, JobState.RUNNING, 2, 2, requeue=True)
    pods = [managed_pod(0, "Running", node="gone"), managed_pod(1, "Running")]
    (obs,) = job_observations([job], pods, {"n1"}, now=T0)
    assert obs.state == JobState.PENDING
    assert "node gone lost" in obs.reason
    (obs,) = job_observations([job], pods[1:], {"n1"}, now=T0)
    assert "1 of 2 pods gone" in obs.reason


def test_pods_of_another_attempt_say_nothing_about_this_one():
    stale = [managed_pod(0, "Failed", reason="Evicted"), managed_pod(1, "Failed", reason="Evicted")]
    newer = ActiveJob(42, 4, JobState.ADMITTED, 2, 2, requeue=True)
    assert job_observations([newer], stale, {"n1"}, now=T0) == []
