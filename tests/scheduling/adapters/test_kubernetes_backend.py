"""The Kubernetes backend end to end: the real client against the fake API server, the real database."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test import TestCase
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from portal.jobs.models import Job, JobTransition
from portal.jobs.services import job_cancel
from portal.jobs.states import JobState
from scheduling.adapters.k8s.manifests import PodJob, pod_manifest
from scheduling.adapters.k8s.pods import ANN_DEVICES, LABEL_QUEUE, LABEL_REPLICA, LABEL_TEAM, pod_phase
from scheduling.adapters.kubernetes import KubernetesBackend
from scheduling.adapters.kubernetes_api import ClusterApiError
from scheduling.adapters.pod_security import pod_spec_violations
from scheduling.engine.model import ReplicaPlacement
from scheduling.selectors import job_never_fits
from scheduling.services import cluster_sync, cycle_run, jobs_sweep
from tests.scheduling.adapters.conftest import backend_for, cycle, pods_of, settle

T1 = datetime(2026, 3, 1, 12, 0, 7, tzinfo=UTC)


T2 = datetime(2026, 3, 1, 13, 30, 0, tzinfo=UTC)


def test_it_sees_gpu_nodes_and_what_foreign_pods_hold(kworld, kube, backend):
    kube.add_node("a100-0", gpus=8, labels={"topology.kubernetes.io/rack": "r1"})
    kube.add_node("cpu-0", gpus=0)
    kube.add_foreign_pod("kube-system", "dcgm-exporter", "a100-0", gpus=2, cpu="2", memory="4Gi")
    settle(backend, kube)
    nodes = {n.name: n for n in backend.nodes()}
    assert nodes["a100-0"].gpu_model == "A100-80GB"
    assert nodes["a100-0"].gpu_count == 8
    assert nodes["cpu-0"].gpu_model is None
    (usage,) = backend.foreign_usage()
    assert (usage.node, usage.gpu_indices, usage.cpu_milli, usage.memory_mib) == ("a100-0", (7, 6), 2000, 4096)


def test_foreign_gpus_are_charged_around_the_devices_portal_jobs_hold(kworld, kube, backend):
    kube.add_node("a100-0", gpus=8)
    job = kworld.submit(gpu=2)
    cycle(backend, kube)
    job.placements.update(gpu_indices=[6, 7])  # as after the jobs that held 0-5 ended
    kube.add_foreign_pod("other", "squatter", "a100-0", gpus=2)
    settle(backend, kube)
    (usage,) = backend.foreign_usage()
    assert usage.gpu_indices == (5, 4)


def test_pods_it_did_not_create_still_consume_capacity(kworld, kube, backend):
    kube.add_node("a100-0", gpus=8)
    kube.add_foreign_pod("other", "squatter", "a100-0", gpus=3)
    big = kworld.submit(gpu=8)
    fits = kworld.submit(gpu=5)
    cycle(backend, kube)
    big.refresh_from_db()
    fits.refresh_from_db()
    assert big.state == JobState.PENDING
    assert fits.state == JobState.ADMITTED


def test_an_admitted_job_becomes_bound_labelled_restricted_pods(kworld, kube, backend):
    kube.add_node("a100-0", gpus=8)
    job = kworld.submit(gpu=2, replicas=2, cpu_milli=3000, memory_mib=8192)
    cycle(backend, kube)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED
    pods = pods_of(kube, job)
    assert [p["metadata"]["name"] for p in pods] == [f"job-{job.pk}-a1-r0", f"job-{job.pk}-a1-r1"]
    placements = {p.replica: p for p in job.placements.all()}
    for pod in pods:
        replica = int(pod["metadata"]["labels"][LABEL_REPLICA])
        assert pod["metadata"]["namespace"] == "team-vision"
        assert pod["spec"]["schedulerName"] == "gpu-portal"
        assert pod["spec"]["nodeName"] == placements[replica].node  # bound through the Binding API
        assert pod["metadata"]["labels"][LABEL_TEAM] == "vision"
        assert pod["metadata"]["labels"][LABEL_QUEUE] == "default"
        assert pod["metadata"]["annotations"][ANN_DEVICES] == ",".join(map(str, placements[replica].gpu_indices))
        assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
        assert pod_spec_violations(pod, namespace="team-vision") == []
    bindings = [path for method, path in kube.requests if method == "POST" and path.endswith("/binding")]
    assert len(bindings) == 2
    assert {e["reason"] for e in kube.events} == {"Scheduled"}


def test_a_gang_admitted_with_fewer_replicas_tells_its_pods_how_many_there_are(kworld, kube, backend):
    kube.add_node("a100-0", gpus=2)
    job = kworld.submit(gpu=1, replicas=4, min_available=2)
    cycle(backend, kube)
    pods = pods_of(kube, job)
    assert len(pods) == 2
    for pod in pods:
        env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
        assert env["PORTAL_REPLICAS"] == "2"


def test_pod_phases_become_job_states_at_the_clusters_times(kworld, kube, backend):
    kube.add_node("a100-0", gpus=8)
    job = kworld.submit(gpu=1)
    cycle(backend, kube)
    (pod,) = pods_of(kube, job)
    kube.run("team-vision", pod["metadata"]["name"], at=T1)
    cycle(backend, kube)
    job.refresh_from_db()
    assert (job.state, job.started_at) == (JobState.RUNNING, T1)
    kube.succeed("team-vision", pod["metadata"]["name"], at=T2)
    cycle(backend, kube)
    job.refresh_from_db()
    assert (job.state, job.finished_at) == (JobState.SUCCEEDED, T2)
    history = list(JobTransition.objects.filter(job=job).values_list("to_state", "at", "actor"))
    assert (JobState.RUNNING, T1, "cluster") in history
    assert (JobState.SUCCEEDED, T2, "cluster") in history
    assert not job.placements.exists()  # a finished job releases its capacity
    # Its finished pod holds nothing; it is kept for its logs.
    cycle(backend, kube)
    assert [pod_phase(p) for p in pods_of(kube, job)] == ["Succeeded"]


def test_a_failed_container_fails_the_job(kworld, kube, backend):
    kube.add_node("a100-0", gpus=8)
    job = kworld.submit(gpu=1)
    cycle(backend, kube)
    (pod,) = pods_of(kube, job)
    kube.run("team-vision", pod["metadata"]["name"], at=T1)
    kube.exit("team-vision", pod["metadata"]["name"], code=2, at=T2)
    cycle(backend, kube)
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert job.finished_at == T2
    assert "exit code 2" in job.message


@pytest.mark.parametrize(("policy", "expected"), [("requeue", JobState.PENDING), ("never", JobState.FAILED)])
def test_an_eviction_requeues_or_fails_the_job_by_its_restart_policy(kworld, kube, backend, policy, expected):
    kube.add_node("a100-0", gpus=8)
    job = kworld.submit(gpu=8, restart_policy=policy)
    cycle(backend, kube)
    (pod,) = pods_of(kube, job)
    kube.run("team-vision", pod["metadata"]["name"], at=T1)
    cycle(backend, kube)
    kube.evict("team-vision", pod["metadata"]["name"])
    settle(backend, kube)
    cluster_sync(backend=backend, now=timezone.now(), converge=False)
    job.refresh_from_db()
    assert job.state == expected
    assert "Evicted" in job.message


def test_losing_a_node_requeues_its_jobs_and_the_next_cycle_places_them_elsewhere(kworld, kube, backend):
    kube.add_node("a100-0", gpus=8)
    job = kworld.submit(gpu=8)
    cycle(backend, kube)
    (pod,) = pods_of(kube, job)
    kube.run("team-vision", pod["metadata"]["name"], at=T1)
    cycle(backend, kube)
    kube.add_node("a100-1", gpus=8)
    kube.delete_node(pod["spec"]["nodeName"])
    cycle(backend, kube)  # observes the loss and requeues; the plan admits it on the other node
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED
    assert job.attempt == 2
    assert job.placements.get().node == "a100-1"
    assert [p["metadata"]["name"] for p in pods_of(kube, job)] == [f"job-{job.pk}-a2-r0"]  # old pod deleted


def test_preemption_deletes_the_victims_pods_with_a_grace_period_and_requeues_it(kworld, kube, backend, settings):
    settings.K8S_POD_GRACE_S = 17
    kube.add_node("a100-0", gpus=8)
    victim = kworld.submit(gpu=8, priority_class=kworld.priorities["low"])
    cycle(backend, kube)
    (pod,) = pods_of(kube, victim)
    kube.run("team-vision", pod["metadata"]["name"], at=T1)
    cycle(backend, kube)
    urgent = kworld.submit(gpu=8, priority_class=kworld.priorities["critical"])
    for _ in range(3):
        cycle(backend, kube)
    victim.refresh_from_db()
    urgent.refresh_from_db()
    assert victim.state == JobState.PENDING
    assert JobTransition.objects.filter(job=victim, to_state=JobState.PREEMPTED).exists()
    assert urgent.state == JobState.ADMITTED
    assert pods_of(kube, victim) == []
    deletes = [path for method, path in kube.requests if method == "DELETE" and pod["metadata"]["name"] in path]
    assert deletes
    assert "gracePeriodSeconds=17" in deletes[0]


def test_a_priority_class_minimum_runtime_protects_a_victim_until_it_has_run_that_long(kworld, kube, backend):
    low = kworld.priorities["low"]
    low.min_runtime_s = 600
    low.save()
    kube.add_node("a100-0", gpus=8)
    victim = kworld.submit(gpu=8, priority_class=low)
    cycle(backend, kube, now=T1)
    (pod,) = pods_of(kube, victim)
    kube.run("team-vision", pod["metadata"]["name"], at=T1)
    cycle(backend, kube, now=T1 + timedelta(seconds=30))
    urgent = kworld.submit(gpu=8, priority_class=kworld.priorities["critical"])
    cycle(backend, kube, now=T1 + timedelta(seconds=590))  # ran 590 of its 600 protected seconds
    victim.refresh_from_db()
    assert victim.state == JobState.RUNNING
    cycle(backend, kube, now=T1 + timedelta(seconds=610))
    victim.refresh_from_db()
    assert victim.state == JobState.PENDING
    reason = JobTransition.objects.get(job=victim, to_state=JobState.PREEMPTED).reason
    assert reason.startswith(f"priority: {urgent.pk} (priority 10000) outranks it (priority 100); rule: least-work")
    assert reason.endswith("it loses 4880 GPU-seconds")  # 8 GPUs x 610 s


def test_on_fixed_mig_partitions_jobs_take_only_the_slices_the_device_plugin_advertises(kworld, kube, backend):
    kube.add_node("a100-mig", gpus=1, mig={"3g.40gb": 2})
    a100 = (kworld.models["A100-80GB"],)
    jobs = [kworld.submit(gpu=0, mig_profile="3g.40gb", allowed_gpu_models=a100) for _ in range(3)]
    cycle(backend, kube)
    for job in jobs:
        job.refresh_from_db()
    assert [j.state for j in jobs] == [JobState.ADMITTED, JobState.ADMITTED, JobState.PENDING]
    pods = [pod for job in jobs[:2] for pod in pods_of(kube, job)]
    limits = [pod["spec"]["containers"][0]["resources"]["limits"] for pod in pods]
    assert all(limit.get("nvidia.com/mig-3g.40gb") == "1" for limit in limits)
    assert jobs[2].pending_reason["waits"]  # both slices in use: waiting helps
    assert "no free MIG slice for 3g.40gb" in jobs[2].pending_reason["message"]


def test_cancelling_deletes_the_pods(kworld, kube, backend, settings, django_capture_on_commit_callbacks):
    settings.CLUSTER_BACKEND = "kubernetes"
    KubernetesBackend._instances = {os.getpid(): backend}  # the process's backend is the test's
    try:
        kube.add_node("a100-0", gpus=8)
        job = kworld.submit(gpu=1)
        cycle(backend, kube)
        assert pods_of(kube, job)
        with django_capture_on_commit_callbacks(execute=True):
            job_cancel(job=job, by=kworld.users["alice"])
        settle(backend, kube)
        assert pods_of(kube, job) == []
    finally:
        KubernetesBackend._instances = {}


def test_a_retried_create_that_gets_409_counts_as_success(kworld, kube, backend):
    kube.add_node("a100-0", gpus=8)
    job = kworld.submit(gpu=1, replicas=2)
    cycle(backend, kube)
    backend.start(job_id=job.pk)  # as a redelivered task would
    backend.start(job_id=job.pk)
    assert len([p for p in kube.created_pods if f"job-{job.pk}-" in p]) == 2
    creates = [path for method, path in kube.requests if method == "POST" and path.endswith("/pods")]
    bindings = [path for method, path in kube.requests if method == "POST" and f"job-{job.pk}" in path]
    assert (len(creates), len(bindings)) == (6, 6)  # the retries' creates and bindings got 409, taken as done


def test_pods_are_created_bound_and_announced_over_one_kept_alive_connection(kube, backend):
    kube.add_node("a100-0", gpus=8)
    manifests = [
        pod_manifest(
            PodJob(700 + i, 1, "team-vision", "vision", "default", "x", (), 1, 100, 100),
            0,
            ReplicaPlacement(node="a100-0", gpu_indices=(i,), gpu_milli=1000),
            scheduler_name="gpu-portal",
            run_as_user=1000,
        )
        for i in range(5)
    ]
    opened = kube.connections
    for manifest in manifests:
        backend.create_and_bind(manifest)
    backend.create_and_bind(manifests[0])  # a retry: 409 on the create and on the bind
    assert [kube.pods[("team-vision", f"job-{700 + i}-a1-r0")]["spec"]["nodeName"] for i in range(5)] == ["a100-0"] * 5
    answered = {(method, what, code): n for (method, what, code), n in kube.answered.items() if method == "POST"}
    assert answered == {
        ("POST", "pods", 201): 5,
        ("POST", "pods/binding", 201): 5,
        ("POST", "events", 201): 5,
        ("POST", "pods", 409): 1,
        ("POST", "pods/binding", 409): 1,
    }
    # Every answer was read to its end, so the one pooled connection served all 17 calls: a response
    # left unread would keep its connection, and the next call would open another.
    assert kube.connections - opened == 1


def test_a_cycle_that_admits_many_jobs_creates_and_binds_their_pods_concurrently(kworld, kube, backend):
    kube.add_node("a100-0", gpus=8)
    kube.add_node("a100-1", gpus=8)
    jobs = [kworld.submit(gpu=1, replicas=2) for _ in range(6)]
    kube.fail("POST", r"/binding$", status=0, delay_s=0.2, times=12)  # slow bindings overlap if concurrent
    cycle(backend, kube)
    for job in jobs:
        pods = pods_of(kube, job)
        assert [p["metadata"]["name"] for p in pods] == [f"job-{job.pk}-a1-r0", f"job-{job.pk}-a1-r1"]
        placements = {p.replica: p.node for p in job.placements.all()}
        assert {p["spec"]["nodeName"] for p in pods} == set(placements.values())
    assert kube.in_flight_max > 1  # several pods were created or bound at once
    assert backend.options.start_threads > 1


def test_one_jobs_pods_failing_to_start_leave_the_others_started_and_fail_the_cycle(kworld, kube, backend):
    kube.add_node("a100-0", gpus=8)
    first = kworld.submit(gpu=1)
    others = [kworld.submit(gpu=1) for _ in range(3)]
    kube.fail("POST", rf"/pods/job-{first.pk}-a1-r0/binding$", status=500, times=100)
    settle(backend, kube)
    with pytest.raises(ClusterApiError), TestCase.captureOnCommitCallbacks(execute=True):
        cycle_run(now=timezone.now(), backend=backend)
    settle(backend, kube)
    for job in others:
        assert [p["spec"].get("nodeName") for p in pods_of(kube, job)] == ["a100-0"]
    assert [p["spec"].get("nodeName") for p in pods_of(kube, first)] == [None]  # created, bind retried later
    kube.faults.clear()
    cycle(backend, kube)
    assert [p["spec"].get("nodeName") for p in pods_of(kube, first)] == ["a100-0"]


def test_an_api_that_stays_down_fails_the_cycle_and_the_next_one_converges(kworld, kube, backend):
    kube.add_node("a100-0", gpus=8)
    kube.fail("POST", r"/pods$", status=500, times=100)
    job = kworld.submit(gpu=1)
    settle(backend, kube)
    with pytest.raises(ClusterApiError), TestCase.captureOnCommitCallbacks(execute=True):
        cycle_run(now=timezone.now(), backend=backend)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED  # the admission is committed; only the pods are missing
    assert pods_of(kube, job) == []
    kube.faults.clear()
    cycle(backend, kube)  # reconcile creates what the failed cycle could not
    assert [p["metadata"]["name"] for p in pods_of(kube, job)] == [f"job-{job.pk}-a1-r0"]


def test_a_pod_created_but_left_unbound_by_an_api_outage_is_bound_by_the_next_cycle(kworld, kube, backend):
    kube.add_node("a100-0", gpus=8)
    kube.fail("POST", r"/binding$", status=500, times=100)
    job = kworld.submit(gpu=1)
    settle(backend, kube)
    with pytest.raises(ClusterApiError), TestCase.captureOnCommitCallbacks(execute=True):
        cycle_run(now=timezone.now(), backend=backend)
    (pod,) = pods_of(kube, job)
    assert not pod["spec"].get("nodeName")  # created, never bound
    kube.faults.clear()
    cycle(backend, kube)  # reconcile binds what the failed cycle created
    (pod,) = pods_of(kube, job)
    assert pod["spec"]["nodeName"] == "a100-0"


def test_reconcile_leaves_admitted_jobs_with_every_pod_bound_alone_in_a_fixed_number_of_queries(kworld, kube, backend):
    kube.add_node("a100-0", gpus=8)  # no kubelet here: bound pods stay Pending, their jobs Admitted

    def reconcile_cost() -> tuple[int, int]:
        settle(backend, kube)
        posts = len([r for r in kube.requests if r[0] == "POST"])
        with CaptureQueriesContext(connection) as queries:
            backend.reconcile(now=timezone.now())
        return len(queries), len([r for r in kube.requests if r[0] == "POST"]) - posts

    jobs = [kworld.submit(gpu=1) for _ in range(2)]
    cycle(backend, kube)
    few = reconcile_cost()
    jobs += [kworld.submit(gpu=1) for _ in range(4)]
    cycle(backend, kube)
    many = reconcile_cost()
    assert Job.objects.filter(pk__in=[j.pk for j in jobs], state=JobState.ADMITTED).count() == 6
    assert few[1] == many[1] == 0  # nothing created or bound again
    assert many[0] == few[0]  # the placements of all admitted jobs in one query


def test_the_never_fits_test_follows_the_node_cache_and_reads_the_nodes_again_only_when_it_changed(kworld, kube):
    class Counting(KubernetesBackend):
        reads = 0

        def nodes(self):
            self.reads += 1
            return super().nodes()

    counting = Counting(api_client=backend_for(kube).api_client, options=backend_for(kube).options)
    kube.add_node("a100-0", gpus=8)
    big = kworld.submit(gpu=16, allowed_gpu_models=[kworld.models["A100-80GB"]])  # the simulated cluster: no node
    settle(counting, kube)
    assert job_never_fits(job=big, backend=counting) is not None  # the largest node has 8
    assert job_never_fits(job=big, backend=counting) is not None
    assert counting.reads == 1  # the second answer was kept: the node cache had not changed
    kube.add_node("a100-big", gpus=16)
    settle(counting, kube)
    assert job_never_fits(job=big, backend=counting) is None
    kube.delete_node("a100-big")
    settle(counting, kube)
    assert job_never_fits(job=big, backend=counting) is not None
    assert counting.reads == 3
    counting.close()


def test_after_a_crash_it_creates_missing_pods_and_deletes_orphans(kworld, kube, backend):
    kube.add_node("a100-0", gpus=8)

    class CrashesBeforePods:
        """The worker died after committing the admission, before creating pods."""

        name = "crashing"

        def __getattr__(self, attr):
            return getattr(backend, attr)

        def start(self, *, job_id: int) -> None:
            pass

        def start_many(self, *, job_ids: list[int]) -> None:
            pass

    job = kworld.submit(gpu=1)
    settle(backend, kube)
    with TestCase.captureOnCommitCallbacks(execute=True):
        cycle_run(now=timezone.now(), backend=CrashesBeforePods())
    assert pods_of(kube, job) == []
    orphan = pod_manifest(
        PodJob(999999, 1, "team-vision", "vision", "default", "x", (), 1, 100, 100),
        0,
        ReplicaPlacement(node="a100-0"),
        scheduler_name="gpu-portal",
        run_as_user=1000,
    )
    backend.create_and_bind(orphan)
    settle(backend, kube)
    cluster_sync(backend=backend, now=timezone.now())
    settle(backend, kube)
    assert [p["metadata"]["name"] for p in pods_of(kube, job)] == [f"job-{job.pk}-a1-r0"]
    assert ("team-vision", "job-999999-a1-r0") not in kube.pods
    assert kube.created_pods.count(f"team-vision/job-{job.pk}-a1-r0") == 1


def test_the_sweeper_requeues_a_job_whose_pods_never_ran(kworld, kube, backend, settings):
    settings.ADMITTED_TIMEOUT_S = 60
    kube.add_node("a100-0", gpus=8)
    job = kworld.submit(gpu=1)
    t0 = timezone.now()
    cycle(backend, kube, now=t0)
    assert jobs_sweep(now=t0 + timedelta(seconds=30), backend=backend) == 0
    with TestCase.captureOnCommitCallbacks(execute=True):
        assert jobs_sweep(now=t0 + timedelta(seconds=61), backend=backend) == 1
    settle(backend, kube)
    job.refresh_from_db()
    assert job.state == JobState.PENDING
    assert pods_of(kube, job) == []


def test_a_second_backend_converges_on_the_same_cluster_without_duplicates(kworld, kube, backend):
    """A restarted worker (fresh caches) rebuilds its view from the API and the database."""
    kube.add_node("a100-0", gpus=8)
    jobs = [kworld.submit(gpu=1) for _ in range(4)]
    cycle(backend, kube)
    backend.close()
    fresh = backend_for(kube)
    try:
        cycle(fresh, kube)
        cycle(fresh, kube)
    finally:
        fresh.close()
    for job in jobs:
        assert kube.created_pods.count(f"team-vision/job-{job.pk}-a1-r0") == 1


def test_a_namespace_that_refuses_pods_does_not_hold_up_other_teams(kworld, kube, backend):
    kube.add_node("a100-0", gpus=8)
    kube.fail("POST", r"^/api/v1/namespaces/team-nlp/pods$", status=403, times=1000)  # an RBAC gap
    refused = kworld.submit("nlp", gpu=1)
    started = kworld.submit("vision", gpu=1)
    cycle(backend, kube)
    assert len(pods_of(kube, started)) == 1
    assert pods_of(kube, refused) == []
    assert Job.objects.get(pk=refused.pk).state == JobState.ADMITTED  # the sweeper requeues it in time


def test_the_jobs_own_labels_go_on_its_pods_but_never_over_the_portals(kworld, kube, backend):
    kube.add_node("a100-0", gpus=8)
    job = kworld.submit(gpu=1, labels=(("project", "vision-2026"), ("cost-center", "cc-42")))
    Job.objects.filter(pk=job.pk).update(labels={**job.labels, "gpu-portal.io/team": "someone-else", "bad key!": "x"})
    cycle(backend, kube)
    (pod,) = pods_of(kube, job)
    labels = pod["metadata"]["labels"]
    assert labels["project"] == "vision-2026"
    assert labels["cost-center"] == "cc-42"
    assert labels[LABEL_TEAM] == "vision"
    assert "bad key!" not in labels


SEED_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "gpu-type", "operator": "In", "values": ["A100", "H100"]}]}
            ]
        },
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "preference": {"matchExpressions": [{"key": "gpu-count", "operator": "Gt", "values": ["4"]}]}}
        ],
    },
    "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "kubernetes.io/hostname"}]},
}
SPREAD = [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule"}]


def test_the_pods_carry_the_affinity_the_engine_applied(kworld, kube, backend):
    kube.add_node("v100-0", gpus=8, labels={"gpu-type": "V100"})
    kube.add_node("a100-0", gpus=8, labels={"gpu-type": "A100", "gpu-count": "8"})
    kube.add_node("a100-1", gpus=8, labels={"gpu-type": "A100", "gpu-count": "8"})
    job = kworld.submit(gpu=2, replicas=2, affinity=SEED_AFFINITY, topology_spread_constraints=tuple(SPREAD))
    cycle(backend, kube)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED
    pods = pods_of(kube, job)
    # The engine kept off the V100 node and put one replica on each A100 node (anti-affinity).
    assert sorted(p["spec"]["nodeName"] for p in pods) == ["a100-0", "a100-1"]
    own = {"matchLabels": {"gpu-portal.io/job-id": str(job.pk)}}
    for pod in pods:
        affinity = pod["spec"]["affinity"]
        assert affinity["nodeAffinity"] == SEED_AFFINITY["nodeAffinity"]
        assert affinity["podAntiAffinity"] == {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": own}
            ]
        }
        assert pod["spec"]["topologySpreadConstraints"] == [
            {
                **SPREAD[0],
                "labelSelector": own,
                "nodeAffinityPolicy": "Honor",
                "nodeTaintsPolicy": "Ignore",
            }
        ]
        assert pod_spec_violations(pod["spec"]) == []


def test_a_one_rack_gang_is_bound_into_one_rack_and_its_pods_say_so(kworld, kube, backend):
    for name, rack in (("n0", "r1"), ("n1", "r2"), ("n2", "r2")):
        kube.add_node(name, gpus=8, labels={"topology.kubernetes.io/rack": rack})
    job = kworld.submit(gpu=8, replicas=2, required_topology="rack")
    cycle(backend, kube)
    pods = pods_of(kube, job)
    assert sorted(p["spec"]["nodeName"] for p in pods) == ["n1", "n2"]
    assert {p["metadata"]["annotations"]["gpu-portal.io/required-topology"] for p in pods} == {"rack"}


# -- distributed training ---------------------------------------------------------------------------


def training_cluster(kube) -> None:
    """Two racks: r1 with two 8-GPU nodes, r2 with one (listed first, so order alone would pick it)."""
    kube.add_node("a-r2", gpus=8, labels={"topology.kubernetes.io/rack": "r2"})
    kube.add_node("b-r1", gpus=8, labels={"topology.kubernetes.io/rack": "r1"})
    kube.add_node("c-r1", gpus=8, labels={"topology.kubernetes.io/rack": "r1"})


def test_a_training_gang_lands_in_one_rack_with_rendezvous_variables_and_a_headless_service(kworld, kube, backend):
    training_cluster(kube)
    job = kworld.submit(kind="training", replicas=2, gpu=8, checkpoint_path="s3://ckpt/llm")
    cycle(backend, kube)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED
    pods = pods_of(kube, job)
    assert sorted(p["spec"]["nodeName"] for p in pods) == ["b-r1", "c-r1"]  # the rack that holds both
    for rank, pod in enumerate(pods):
        env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
        assert env["MASTER_ADDR"] == f"job-{job.pk}-r0.job-{job.pk}.team-vision.svc"
        assert (env["NNODES"], env["NPROC_PER_NODE"], env["WORLD_SIZE"]) == ("2", "8", "16")
        assert (env["NODE_RANK"], env["RANK"]) == (str(rank), str(rank * 8))
        assert env["CHECKPOINT_PATH"] == "s3://ckpt/llm"
        assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == (f"job-{job.pk}-r{rank}", f"job-{job.pk}")
    service = kube.objects["Service"][("team-vision", f"job-{job.pk}")]
    assert service["spec"]["clusterIP"] == "None"


def test_one_failed_worker_restarts_the_whole_gang_until_the_limit_then_fails(kworld, kube, backend):
    training_cluster(kube)
    job = kworld.submit(kind="training", replicas=2, gpu=8, max_restarts=1, checkpoint_path="/ckpt/a")
    cycle(backend, kube)
    first, second = pods_of(kube, job)
    for pod in (first, second):
        kube.run("team-vision", pod["metadata"]["name"], at=T1)
    cycle(backend, kube)
    kube.exit("team-vision", second["metadata"]["name"], code=137, at=T2)
    cycle(backend, kube)  # the failure requeues the gang; the same cycle admits it again
    job.refresh_from_db()
    assert (job.state, job.attempt, job.restarts) == (JobState.ADMITTED, 2, 1)
    restart = JobTransition.objects.get(job=job, from_state=JobState.RUNNING, to_state=JobState.PENDING)
    assert restart.at == T2
    assert "whole gang restarted (1 of 1)" in restart.reason
    assert "exit code 137" in restart.reason
    assert "resume from checkpoint /ckpt/a" in restart.reason
    # The healthy worker of attempt 1 was deleted with the failed one: the gang restarts whole.
    assert ("team-vision", first["metadata"]["name"]) not in kube.pods
    assert sorted(p["metadata"]["name"] for p in pods_of(kube, job)) == [
        f"job-{job.pk}-a1-r1",  # the failed pod is kept for its logs
        f"job-{job.pk}-a2-r0",
        f"job-{job.pk}-a2-r1",
    ]
    again = [p for p in pods_of(kube, job) if "-a2-" in p["metadata"]["name"]]
    kube.run("team-vision", again[0]["metadata"]["name"])
    kube.exit("team-vision", again[0]["metadata"]["name"], code=1)
    cycle(backend, kube)
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert "restart limit 1 reached after 1 gang restart" in job.message
    assert ("team-vision", f"job-{job.pk}") not in kube.objects.get("Service", {})  # removed with the job


def test_a_batch_job_with_a_failed_replica_still_just_fails(kworld, kube, backend):
    training_cluster(kube)
    job = kworld.submit(replicas=2, gpu=8, max_restarts=3)
    cycle(backend, kube)
    pod = pods_of(kube, job)[0]
    kube.run("team-vision", pod["metadata"]["name"])
    kube.exit("team-vision", pod["metadata"]["name"], code=1)
    cycle(backend, kube)
    job.refresh_from_db()
    assert (job.state, job.restarts) == (JobState.FAILED, 0)
    assert not kube.objects.get("Service")  # only training jobs get one


# -- spot ---------------------------------------------------------------------------------------------

SPOT_LABELS = {"karpenter.sh/capacity-type": "spot"}
SPOT_TAINT = {"key": "spot", "value": "true", "effect": "NoSchedule"}


def test_a_spot_job_tolerates_the_spot_taint_and_a_termination_notice_requeues_it_at_the_notice(kworld, kube, backend):
    kube.add_node("spot-0", gpus=8, labels=SPOT_LABELS, taints=[SPOT_TAINT])
    job = kworld.submit(gpu=8, spot=True, checkpoint_path="/ckpt/x", restart_policy="never")
    cycle(backend, kube)
    (pod,) = pods_of(kube, job)
    assert {"key": "spot", "operator": "Exists"} in pod["spec"]["tolerations"]
    kube.run("team-vision", pod["metadata"]["name"], at=T1)
    cycle(backend, kube)
    notice = T1 + timedelta(minutes=10)
    kube.taint_node(
        "spot-0", {"key": "karpenter.sh/disrupted", "effect": "NoSchedule", "timeAdded": notice.isoformat()}
    )
    cycle(backend, kube)
    job.refresh_from_db()
    assert job.state == JobState.PENDING  # requeued whatever its restart policy
    assert job.message == (
        "interrupted by spot reclaim: node spot-0 reclaimed (karpenter.sh/disrupted); requeued; "
        "resume from checkpoint /ckpt/x"
    )
    assert job.attempts.get().ended_at == notice  # billed up to the notice
    assert not pods_of(kube, job)  # its pod on the reclaimed node was deleted


def test_a_job_that_did_not_opt_in_never_lands_on_a_spot_node(kworld, kube, backend, settings):
    settings.QUEUE_NEVER_FITTING_JOBS = True
    kube.add_node("spot-0", gpus=8, labels=SPOT_LABELS, taints=[SPOT_TAINT])
    job = kworld.submit(gpu=8)
    cycle(backend, kube)
    job.refresh_from_db()
    assert job.state == JobState.PENDING
    assert not pods_of(kube, job)
