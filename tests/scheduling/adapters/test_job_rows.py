"""``scheduling.adapters.job_rows``: a kept read (the last read's jobs, re-read where they changed)
equals a whole read, field by field, after random writes of every kind; a write still in progress
during a read is seen by the next; any doubt reads everything.

The whole read is the reference: a fresh ``KeptJobs`` has nothing kept and reads every job. These
tests commit (``transaction=True``): inside a test's transaction the reader reads everything.
"""

from __future__ import annotations

import random
import threading
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction
from django.utils import timezone

from portal.jobs.models import FlavorQuota, GpuModel, Job, PriorityClass, ReplicaPlacement
from portal.jobs.services import job_cancel
from portal.jobs.states import JobState
from portal.jobs.transitions import job_transition
from scheduling.adapters import orm
from scheduling.adapters.apply import pending_update
from scheduling.adapters.job_rows import KeptJobs
from scheduling.adapters.simulated import SimulatedCluster
from scheduling.models import SimNode
from scheduling.services import cycle_run

pytestmark = pytest.mark.django_db(transaction=True)

BACKEND = SimulatedCluster(speedup=1.0)


def both(kept: KeptJobs, *, now, since):
    """The kept read and a whole one, both as snapshots."""
    mine = orm.snapshot_load(backend=BACKEND, now=now, recent_since=since, kept=kept)
    whole = orm.snapshot_load(backend=BACKEND, now=now, recent_since=since)
    return mine, whole


def assert_same(mine, whole) -> None:
    """Field by field, each job by id first (a readable failure), then the snapshots whole."""
    for name in ("workloads", "recent"):
        a = {w.id: w for w in getattr(mine, name)}
        b = {w.id: w for w in getattr(whole, name)}
        assert a.keys() == b.keys(), name
        for pk in a:
            assert a[pk] == b[pk], (name, pk)
    assert mine == whole


def some_job(rng: random.Random, *states: str) -> Job | None:
    ids = list(Job.objects.filter(state__in=states).order_by("id").values_list("id", flat=True))
    return Job.objects.get(pk=rng.choice(ids)) if ids else None


def random_write(rng: random.Random, world, now) -> str:
    """One write of a kind the portal makes (or an admin, or a script), chosen at random; its name."""
    kind = rng.choice(
        [
            "submit", "submit", "submit", "cycle", "cancel", "finish", "requeue_backoff", "delete", "quota",
            "node", "priority", "allowed", "placement", "outputs", "raw_edit", "age", "requeue_due",
        ]
    )  # fmt: skip
    if kind == "submit":
        extra: dict[str, object] = {}
        if rng.random() < 0.3:
            extra["allowed_gpu_models"] = [world.models[rng.choice(["A100-80GB", "T4"])]]
        if rng.random() < 0.2:
            extra["spot"] = True  # the spot toleration and preferred label (the spec's parts)
        world.submit(rng.choice(["vision", "nlp"]), gpu=rng.choice([1, 2, 4]), **extra)
    elif kind == "cycle":
        cycle_run(now=now, backend=BACKEND)
    elif kind == "cancel" and (job := some_job(rng, JobState.PENDING, JobState.ADMITTED, JobState.RUNNING)):
        job_cancel(job=job, by=world.users["admin"], at=now)
    elif kind == "finish" and (job := some_job(rng, JobState.RUNNING)):
        with transaction.atomic():
            job_transition(job=job, to_state=JobState.SUCCEEDED, at=now, reason="done", actor="cluster")
    elif kind in ("requeue_backoff", "requeue_due") and (job := some_job(rng, JobState.ADMITTED, JobState.RUNNING)):
        with transaction.atomic():
            job_transition(job=job, to_state=JobState.PENDING, at=now, reason="requeued")
            ahead_s = 600 if kind == "requeue_backoff" else -600
            Job.objects.filter(pk=job.pk).update(not_before=now + timedelta(seconds=ahead_s))
    elif kind == "delete" and (job := some_job(rng, *JobState.values)):
        job.delete()
    elif kind == "quota":
        FlavorQuota.objects.filter(pk=rng.choice(list(FlavorQuota.objects.values_list("pk", flat=True)))).update(
            nominal_gpus=rng.choice([4, 8, 16])
        )
    elif kind == "node":
        node = SimNode.objects.order_by("?").first()
        assert node is not None
        node.unschedulable = not node.unschedulable
        node.save()
    elif kind == "priority":
        PriorityClass.objects.filter(name="default").update(value=rng.choice([400, 500, 600]))
    elif kind == "allowed" and (job := some_job(rng, JobState.PENDING)):
        job.allowed_gpu_models.set([GpuModel.objects.order_by("?")[0]])
    elif kind == "placement" and (placement := ReplicaPlacement.objects.order_by("?").first()):
        ReplicaPlacement.objects.filter(pk=placement.pk).update(cpu_milli=placement.cpu_milli + 1)
    elif kind == "outputs" and (job := some_job(rng, JobState.PENDING)):
        pending_update([(job.pk, {"kind": "test"}, rng.randint(1, 9), now, None)])
    elif kind == "raw_edit" and (job := some_job(rng, JobState.PENDING)):
        Job.objects.filter(pk=job.pk).update(runtime_s=job.runtime_s + 60)  # no updated_at, no save()
    elif kind == "age" and (job := some_job(rng, *JobState.values)):
        Job.objects.filter(pk=job.pk).update(created_at=now - timedelta(hours=2))  # out of the recent ones
    else:
        return "nothing"
    return kind


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_kept_read_equals_a_whole_read_after_random_writes(world, seed):
    rng = random.Random(seed)
    kept = KeptJobs()
    now = timezone.now()
    for _ in range(6):
        world.submit("vision", gpu=1)
    kinds = []
    for _ in range(40):
        kinds.append(random_write(rng, world, now))
        now += timedelta(seconds=rng.choice([1, 30, 400]))  # back-offs end, submissions age
        mine, whole = both(kept, now=now, since=now - timedelta(hours=1))
        assert_same(mine, whole)
    # Most reads were kept ones (the test would pass vacuously if every read were whole).
    assert kept._read is not None
    assert not kept._read.whole
    assert {"submit", "cycle"} <= set(kinds)


def test_only_the_jobs_changed_since_are_read_again(world):
    kept = KeptJobs()
    now = timezone.now()
    jobs = [world.submit("vision", gpu=1) for _ in range(5)]
    kept.read(since=None)
    first = kept._read.jobs
    Job.objects.filter(pk=jobs[0].pk).update(message="edited")  # a column the snapshot does not read: read again
    pending_update([(jobs[1].pk, {"kind": "test"}, 3, now, now)])  # the cycle's own outputs: kept
    read = kept.read(since=None)
    assert not read.whole
    assert read.jobs[jobs[0].pk] is not first[jobs[0].pk]
    # Which jobs are kept, not in what order: the reader's dict follows the rows' order on disk, and
    # every consumer walks it sorted by id.
    assert sorted(pk for pk in read.jobs if read.jobs[pk] is first[pk]) == sorted(j.pk for j in jobs[1:])


def test_a_write_in_progress_during_a_read_is_seen_by_the_next(world):
    kept = KeptJobs()
    now = timezone.now()
    job = world.submit("vision", gpu=1)
    kept.read(since=None)
    written, release, done = threading.Event(), threading.Event(), threading.Event()

    def writer() -> None:
        try:
            with transaction.atomic():
                Job.objects.filter(pk=job.pk).update(gpu=3)
                written.set()
                release.wait(10)
        finally:
            connections.close_all()
            done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    assert written.wait(10)
    # A later transaction commits first: the writer's is then below the read's xmax, in progress.
    world.submit("nlp", gpu=1)
    mine, whole = both(kept, now=now, since=None)  # the write is not committed: neither sees it
    assert kept._mark is not None
    assert kept._mark.running
    assert_same(mine, whole)
    assert next(w for w in mine.workloads if w.id == str(job.pk)).resources.gpu == 1
    release.set()
    assert done.wait(10)
    thread.join()
    mine, whole = both(kept, now=now, since=None)
    assert_same(mine, whole)
    assert next(w for w in mine.workloads if w.id == str(job.pk)).resources.gpu == 3
    assert not kept._read.whole


def test_a_change_to_a_joined_table_or_another_server_reads_everything(world):
    kept = KeptJobs()
    world.submit("vision", gpu=1)
    assert kept.read(since=None).whole
    assert not kept.read(since=None).whole
    PriorityClass.objects.filter(name="default").update(value=501)  # every job's priority at once
    assert kept.read(since=None).whole
    kept._mark = kept._mark.__class__(("another", None), kept._mark.xmin, kept._mark.xmax, kept._mark.running)
    assert kept.read(since=None).whole


def test_while_a_stamping_trigger_is_disabled_nothing_is_kept(world):
    kept = KeptJobs()
    job = world.submit("vision", gpu=1)
    kept.read(since=None)
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE jobs_replicaplacement DISABLE TRIGGER jobs_replicaplacement_touch_update_new")
    try:
        assert not kept.read(since=None).whole  # this read finds it disabled, so keeps nothing for the next
        assert kept.read(since=None).whole
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE jobs_replicaplacement ENABLE TRIGGER jobs_replicaplacement_touch_update_new")
    kept.read(since=None)
    assert not kept.read(since=None).whole
    assert job.pk in kept.read(since=None).jobs


def test_inside_a_transaction_of_its_own_every_job_is_read(world):
    kept = KeptJobs()
    kept.read(since=None)
    with transaction.atomic():
        job = world.submit("vision", gpu=1)  # uncommitted: the caller's own write
        read = kept.read(since=None)
        assert read.whole
        assert job.pk in read.jobs
    assert connection.vendor == "postgresql"
