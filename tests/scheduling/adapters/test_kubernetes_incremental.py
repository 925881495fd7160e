"""Observe and reconcile look only at the job attempts whose pods changed, and a full pass every
``K8S_RESYNC_S`` catches what no pod event announced; the nodes are converted once per node-cache
version (the real client against the fake API server)."""

from __future__ import annotations

import dataclasses
import time

import pytest
from django.utils import timezone

from portal.jobs.models import Job
from portal.jobs.services import job_cancel
from portal.jobs.states import JobState
from scheduling.adapters.kubernetes import OBSERVE
from scheduling.services import cluster_sync
from tests.scheduling.adapters.conftest import FAST, backend_for, cycle, pods_of, settle

RESYNC_S = 1.5


@pytest.fixture
def resyncing(kube):
    """A backend whose full passes come every ``RESYNC_S``."""
    b = backend_for(kube, dataclasses.replace(FAST, resync_s=RESYNC_S))
    yield b
    b.close()


class Recording:
    """Wraps a backend's ``_active_jobs`` to record which jobs each observe pass read."""

    def __init__(self, backend) -> None:
        self.calls: list[set[int] | None] = []
        original = backend._active_jobs

        def active_jobs(job_ids=None):
            self.calls.append(None if job_ids is None else set(job_ids))
            return original(job_ids)

        backend._active_jobs = active_jobs


def _running_jobs(kworld, kube, backend, n: int) -> list[Job]:
    kube.add_node("a100-0", gpus=8)
    jobs = [kworld.submit(gpu=1) for _ in range(n)]
    cycle(backend, kube)
    for job in jobs:
        (pod,) = pods_of(kube, job)
        kube.run("team-vision", pod["metadata"]["name"])
    cycle(backend, kube)
    assert {j.state for j in Job.objects.filter(pk__in=[j.pk for j in jobs])} == {JobState.RUNNING}
    return jobs


def test_a_pass_reads_only_the_jobs_whose_pods_changed(kworld, kube, resyncing):
    jobs = _running_jobs(kworld, kube, resyncing, 4)
    recording = Recording(resyncing)
    settle(resyncing, kube)
    cluster_sync(backend=resyncing, now=timezone.now())
    kube.succeed("team-vision", pods_of(kube, jobs[2])[0]["metadata"]["name"])
    settle(resyncing, kube)
    cluster_sync(backend=resyncing, now=timezone.now())
    assert recording.calls == [set(), {jobs[2].pk}]  # nothing changed, then one job's pod
    assert Job.objects.get(pk=jobs[2].pk).state == JobState.SUCCEEDED
    time.sleep(RESYNC_S)
    cluster_sync(backend=resyncing, now=timezone.now())
    assert recording.calls[-1] is None  # the periodic full pass reads every active job


def test_a_pod_change_whose_notice_was_lost_is_observed_at_the_next_full_pass(kworld, kube, resyncing):
    kube.add_node("a100-0", gpus=8)
    job = kworld.submit(gpu=1)
    cycle(resyncing, kube)
    cluster_sync(backend=resyncing, now=timezone.now())  # the first passes are full ones
    (pod,) = pods_of(kube, job)
    kube.run("team-vision", pod["metadata"]["name"])
    settle(resyncing, kube)
    resyncing.pod_informer.take_changes(OBSERVE)  # the change reached the cache, its notice got lost
    cluster_sync(backend=resyncing, now=timezone.now())
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED  # the incremental pass did not see it
    time.sleep(RESYNC_S)
    cluster_sync(backend=resyncing, now=timezone.now())
    job.refresh_from_db()
    assert job.state == JobState.RUNNING


def test_pods_left_behind_by_a_cancel_whose_delete_never_ran_go_at_the_next_full_pass(kworld, kube, resyncing):
    (job,) = _running_jobs(kworld, kube, resyncing, 1)
    job_cancel(job=job, by=kworld.users["alice"])  # its on-commit pod delete never runs (a crash)
    cluster_sync(backend=resyncing, now=timezone.now())
    settle(resyncing, kube)
    assert len(pods_of(kube, job)) == 1  # no pod event named the job: the incremental pass skipped it
    time.sleep(RESYNC_S)
    cluster_sync(backend=resyncing, now=timezone.now())
    settle(resyncing, kube)
    assert pods_of(kube, job) == []


def test_observations_that_were_never_applied_are_made_again(kworld, kube, resyncing):
    kube.add_node("a100-0", gpus=8)
    job = kworld.submit(gpu=1)
    cycle(resyncing, kube)
    cluster_sync(backend=resyncing, now=timezone.now())
    (pod,) = pods_of(kube, job)
    kube.run("team-vision", pod["metadata"]["name"])
    settle(resyncing, kube)
    assert [o.state for o in resyncing.observe(now=timezone.now())] == [JobState.RUNNING]  # then a crash
    assert [o.state for o in resyncing.observe(now=timezone.now())] == [JobState.RUNNING]
    resyncing.observed()
    assert resyncing.observe(now=timezone.now()) == []  # applied or not, nothing changed since


def test_a_relist_makes_the_next_pass_a_full_one(kworld, kube, resyncing):
    kube.add_node("a100-0", gpus=8)
    settle(resyncing, kube)
    resyncing.pod_informer.take_changes(OBSERVE)
    resyncing.pod_informer.relist()
    assert resyncing.pod_informer.take_changes(OBSERVE).everything
    assert not resyncing.pod_informer.take_changes(OBSERVE).everything


def test_a_sync_after_nothing_changed_asks_the_api_nothing(kworld, kube, resyncing):
    _running_jobs(kworld, kube, resyncing, 2)
    settle(resyncing, kube)
    cluster_sync(backend=resyncing, now=timezone.now())
    before = len(kube.requests)
    cluster_sync(backend=resyncing, now=timezone.now())
    # No Services or KubeRay objects listed while no training or Ray job is active; watches go on.
    assert [r for r in kube.requests[before:] if "watch=" not in r[1]] == []


def test_the_nodes_are_converted_again_only_when_the_node_cache_changed(kworld, kube, backend):
    kube.add_node("a100-0", gpus=8)
    settle(backend, kube)
    first = backend.nodes()
    assert backend.nodes()[0] is first[0]  # a cycle reads them twice: snapshot and foreign usage
    kube.add_node("a100-1", gpus=8)
    settle(backend, kube)
    again = backend.nodes()
    assert [n.name for n in again] == ["a100-0", "a100-1"]
    assert again[0] is not first[0]
