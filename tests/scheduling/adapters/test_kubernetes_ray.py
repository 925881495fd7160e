"""Ray jobs on the Kubernetes backend: the real client against the fake API server, which serves KubeRay's
``ray.io/v1`` RayJob and RayCluster objects; KubeRay's status updates are played by the test."""

from __future__ import annotations

import os
from datetime import UTC, datetime

from portal.jobs.models import Job
from portal.jobs.services import job_cancel
from portal.jobs.states import JobState
from scheduling.adapters.k8s.pods import LABEL_ATTEMPT, LABEL_JOB, LABEL_QUEUE, LABEL_TEAM, MANAGED_BY
from scheduling.adapters.k8s.ray_objects import LABEL_RAY_GROUP
from scheduling.adapters.kubernetes import KubernetesBackend
from scheduling.adapters.pod_security import pod_spec_violations
from scheduling.services import cluster_sync
from tests.scheduling.adapters.conftest import cycle, settle

T_READY = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
T_END = datetime(2026, 3, 1, 14, 0, 0, tzinfo=UTC)
GROUPS = [
    {"name": "big", "replicas": 2, "gpu": 4, "cpu_milli": 8000, "memory_mib": 65536},
    {"name": "small", "replicas": 1, "gpu": 2, "cpu_milli": 4000, "memory_mib": 16384},
]


def ray_job(kworld, mode: str = "job", **overrides) -> Job:
    ray = {"mode": mode, "worker_groups": GROUPS}
    if mode == "job":
        ray["entrypoint"] = "python train.py --epochs 3"
    spec = {"kind": "ray", "gpu": 0, "cpu_milli": 2000, "memory_mib": 4096, "ray": ray, **overrides}
    return kworld.submit(image="rayproject/ray:2.34.0", **spec)


def objects(kube, kind: str) -> dict:
    return kube.objects.get(kind, {})


def container_of(template: dict) -> dict:
    (container,) = template["spec"]["containers"]
    return container


def test_an_admitted_ray_job_becomes_one_rayjob_with_its_groups_on_the_chosen_nodes(kworld, kube, backend):
    kube.add_node("a100-0", gpus=8)
    kube.add_node("a100-1", gpus=8)
    job = ray_job(kworld, checkpoint_path="s3://ckpt/r", labels=(("project", "atlas"),))
    cycle(backend, kube)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED
    (rayjob,) = objects(kube, "RayJob").values()
    assert rayjob["apiVersion"] == "ray.io/v1"
    assert rayjob["metadata"]["name"] == f"job-{job.pk}-a1"
    assert rayjob["metadata"]["namespace"] == "team-vision"
    labels = rayjob["metadata"]["labels"]
    assert labels[MANAGED_BY[0]] == MANAGED_BY[1]
    assert (labels[LABEL_JOB], labels[LABEL_ATTEMPT]) == (str(job.pk), "1")
    assert (labels[LABEL_TEAM], labels[LABEL_QUEUE], labels["project"]) == ("vision", "default", "atlas")
    spec = rayjob["spec"]
    assert spec["entrypoint"] == "python train.py --epochs 3"
    assert spec["submissionMode"] == "HTTPMode"  # no submitter pod outside the gang
    cluster = spec["rayClusterSpec"]
    head = cluster["headGroupSpec"]["template"]
    assert container_of(head)["resources"]["limits"] == {"cpu": "2000m", "memory": "4096Mi", "nvidia.com/gpu": "0"}
    assert container_of(head)["image"] == "rayproject/ray:2.34.0"
    assert {"name": "CHECKPOINT_PATH", "value": "s3://ckpt/r"} in container_of(head)["env"]
    groups = {g["groupName"]: g for g in cluster["workerGroupSpecs"]}
    assert [(g["replicas"], g["minReplicas"], g["maxReplicas"]) for g in groups.values()] == [(2, 2, 2), (1, 1, 1)]
    assert container_of(groups["big"]["template"])["resources"]["requests"] == {
        "cpu": "8000m",
        "memory": "65536Mi",
        "nvidia.com/gpu": "4",
    }
    assert container_of(groups["small"]["template"])["resources"]["limits"]["nvidia.com/gpu"] == "2"
    # each group only on the nodes the engine chose for it
    placements = list(job.placements.order_by("replica"))
    assert [len(p.gpu_indices) for p in placements] == [0, 4, 4, 2]
    chosen = {"head": {placements[0].node}, "big": {p.node for p in placements[1:3]}, "small": {placements[3].node}}
    for name, template in [("head", head)] + [(n, g["template"]) for n, g in groups.items()]:
        terms = template["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        (term,) = terms["nodeSelectorTerms"]
        assert term["matchFields"] == [{"key": "metadata.name", "operator": "In", "values": sorted(chosen[name])}]
        assert template["metadata"]["labels"][LABEL_RAY_GROUP] == name
        assert template["metadata"]["labels"][LABEL_ATTEMPT] == "1"  # KubeRay's pods are the attempt's
        assert pod_spec_violations(template) == []  # restricted, as the portal's own pods
    # no pod of the portal's own: KubeRay makes them
    assert not [p for p in kube.pods.values() if p["metadata"]["labels"].get(LABEL_JOB) == str(job.pk)]


def test_kuberays_status_runs_and_finishes_the_job_at_its_own_times(kworld, kube, backend):
    kube.add_node("a100-0", gpus=8)
    kube.add_node("a100-1", gpus=8)
    job = ray_job(kworld)
    cycle(backend, kube)
    name = f"job-{job.pk}-a1"
    kube.set_status(
        "RayJob",
        "team-vision",
        name,
        {
            "jobDeploymentStatus": "Running",
            "jobStatus": "RUNNING",
            "startTime": "2026-03-01T11:58:00Z",
            "rayClusterStatus": {
                "state": "ready",
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-03-01T12:00:00Z"}],
            },
        },
    )
    cycle(backend, kube)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    assert job.started_at == T_READY  # the cluster ready, not the object's creation
    kube.set_status(
        "RayJob",
        "team-vision",
        name,
        {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED", "endTime": "2026-03-01T14:00:00Z"},
    )
    cycle(backend, kube)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED
    assert job.finished_at == T_END
    (attempt,) = job.attempts.all()
    assert attempt.gpu_share_7000ths == 10 * 7000  # every worker's GPUs: 2 x 4 + 2
    assert attempt.cpu_milli == 2000 + 2 * 8000 + 4000


def test_a_failed_rayjob_fails_the_job_with_kuberays_message(kworld, kube, backend):
    kube.add_node("a100-0", gpus=16)
    job = ray_job(kworld)
    cycle(backend, kube)
    kube.set_status(
        "RayJob",
        "team-vision",
        f"job-{job.pk}-a1",
        {
            "jobDeploymentStatus": "Failed",
            "jobStatus": "FAILED",
            "message": "exit 1",
            "endTime": "2026-03-01T14:00:00Z",
        },
    )
    cycle(backend, kube)
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert "exit 1" in job.message


def test_a_ray_cluster_becomes_a_raycluster_that_runs_until_cancelled_then_is_deleted(
    kworld, kube, backend, settings, django_capture_on_commit_callbacks
):
    settings.CLUSTER_BACKEND = "kubernetes"
    KubernetesBackend._instances = {os.getpid(): backend}  # the process's backend is the test's
    try:
        kube.add_node("a100-0", gpus=16)
        job = ray_job(kworld, mode="cluster")
        cycle(backend, kube)
        assert objects(kube, "RayJob") == {}
        (cluster,) = objects(kube, "RayCluster").values()
        assert "entrypoint" not in cluster["spec"]
        assert [g["groupName"] for g in cluster["spec"]["workerGroupSpecs"]] == ["big", "small"]
        kube.set_status(
            "RayCluster",
            "team-vision",
            cluster["metadata"]["name"],
            {"state": "ready", "lastUpdateTime": "2026-03-01T12:00:00Z"},
        )
        cycle(backend, kube)
        job.refresh_from_db()
        assert job.state == JobState.RUNNING
        assert job.started_at == T_READY
        with django_capture_on_commit_callbacks(execute=True):
            job_cancel(job=job, by=kworld.users["alice"])
        settle(backend, kube)
        assert objects(kube, "RayCluster") == {}
        assert ("DELETE", f"/apis/ray.io/v1/namespaces/team-vision/rayclusters/job-{job.pk}-a1") in [
            (method, path.split("?")[0]) for method, path in kube.requests
        ]
    finally:
        KubernetesBackend._instances = {}


def test_a_preempted_ray_job_loses_its_object_and_requeues(kworld, kube, backend):
    kube.add_node("a100-0", gpus=16)
    low = ray_job(kworld, priority_class=kworld.priorities["low"])
    cycle(backend, kube)
    kube.set_status(
        "RayJob", "team-vision", f"job-{low.pk}-a1", {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}
    )
    cycle(backend, kube)
    low.refresh_from_db()
    assert low.state == JobState.RUNNING
    urgent = kworld.submit(gpu=8, priority_class=kworld.priorities["critical"])
    cycle(backend, kube)
    low.refresh_from_db()
    assert low.state == JobState.PENDING
    assert objects(kube, "RayJob") == {}
    cycle(backend, kube)
    urgent.refresh_from_db()
    assert urgent.state == JobState.ADMITTED


def test_reconcile_creates_a_missing_object_and_deletes_a_stale_one(kworld, kube, backend):
    kube.add_node("a100-0", gpus=16)
    job = ray_job(kworld)
    cycle(backend, kube)
    (key,) = objects(kube, "RayJob")
    kube.objects["RayJob"].pop(key)  # lost (a crash between the commit and the create)
    report = backend.reconcile(now=datetime.now(tz=UTC))
    assert report["ray_created"] == 1
    assert list(objects(kube, "RayJob")) == [key]
    Job.objects.filter(pk=job.pk).update(state=JobState.CANCELLED)  # finished behind the backend's back
    report = backend.reconcile(now=datetime.now(tz=UTC))
    assert report["ray_deleted"] == 1
    assert objects(kube, "RayJob") == {}


def test_a_running_ray_job_whose_object_vanished_is_requeued(kworld, kube, backend):
    kube.add_node("a100-0", gpus=16)
    job = ray_job(kworld)
    cycle(backend, kube)
    name = f"job-{job.pk}-a1"
    kube.set_status("RayJob", "team-vision", name, {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"})
    cycle(backend, kube)
    kube.objects["RayJob"].pop(("team-vision", name))
    cluster_sync(backend=backend, now=datetime.now(tz=UTC))
    job.refresh_from_db()
    assert job.state == JobState.PENDING
    assert f"Ray object {name} gone" in job.message
