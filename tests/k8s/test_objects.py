"""Pure translations between Kubernetes objects and engine values, and the restricted pod profile."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from portal.jobs.states import JobState
from scheduling.adapters import k8s_objects as ko
from scheduling.adapters.pod_security import job_request_violations, pod_spec_violations
from scheduling.engine.model import ReplicaPlacement
from tests.k8s.fakeapi import FakeKubeApi

JOB = ko.PodJob(
    job_id=42,
    attempt=3,
    namespace="team-vision",
    team="vision",
    queue="default",
    image="nvcr.io/nvidia/pytorch:24.08-py3",
    command=("python", "train.py"),
    replicas=2,
    cpu_milli=4000,
    memory_mib=16384,
    tolerations=({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},),
    node_selector=(("pool", "a100"),),
)


def node(**kwargs) -> dict:
    api = FakeKubeApi()
    return api.add_node("n1", **kwargs)


@pytest.mark.parametrize(
    ("value", "milli"),
    [("3800m", 3800), ("4", 4000), ("0.5", 500), ("1e3", 1_000_000), (2, 2000)],
)
def test_it_parses_cpu_quantities(value, milli):
    assert ko.cpu_milli_of(value) == milli


@pytest.mark.parametrize(("value", "mib"), [("16Gi", 16384), ("1024Mi", 1024), ("1048576Ki", 1024), ("1G", 953)])
def test_it_parses_memory_quantities(value, mib):
    assert ko.memory_mib_of(value) == mib


def test_it_reads_gpu_model_memory_topology_and_taints_from_the_node():
    raw = node(
        gpus=8,
        labels={"topology.kubernetes.io/rack": "r7"},
        taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        cpu="63500m",
        memory="512Gi",
    )
    gpu_node = ko.gpu_node_from(raw, known_models=["A100-80GB", "H100-80GB", "T4"])
    assert gpu_node.gpu_model == "A100-80GB"
    assert (gpu_node.gpu_count, gpu_node.gpu_memory_gib) == (8, 80)
    assert (gpu_node.cpu_milli, gpu_node.memory_mib) == (63500, 512 * 1024)
    assert ("topology.kubernetes.io/rack", "r7") in gpu_node.labels
    assert ("topology.kubernetes.io/zone", "zone-a") in gpu_node.labels
    assert gpu_node.taints[0].key == "nvidia.com/gpu"
    assert not gpu_node.unschedulable
    assert not gpu_node.mig_enabled


def test_a_mig_node_counts_devices_from_gpu_feature_discovery():
    gpu_node = ko.gpu_node_from(node(gpus=2, mig={"1g.10gb": 14}), known_models=["A100-80GB"])
    assert gpu_node.mig_enabled
    assert gpu_node.gpu_count == 2


def test_cordoned_and_not_ready_nodes_are_unschedulable():
    assert ko.gpu_node_from(node(unschedulable=True)).unschedulable
    assert ko.gpu_node_from(node(ready=False)).unschedulable


def test_an_unknown_product_keeps_its_own_name():
    assert ko.gpu_model_name("NVIDIA-L40S", 46068 // 1024, ["A100-80GB"]) == "L40S"
    assert ko.gpu_model_name("Tesla-T4", 15, ["T4", "A100-80GB"]) == "T4"


def test_it_names_what_a_node_lacks():
    raw = node(gpus=8)
    raw["metadata"]["labels"].pop("nvidia.com/gpu.product")
    raw["metadata"]["labels"].pop("topology.kubernetes.io/zone")
    problems = ko.node_problems(raw, rack_label="topology.kubernetes.io/rack")
    assert any("GPU Feature Discovery" in p for p in problems)
    assert any("zone" in p for p in problems)
    assert any("rack" in p for p in problems)
    plain = node(gpus=0)
    plain["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-A100-SXM4-80GB"
    assert any("device plugin" in p for p in ko.node_problems(plain, rack_label=""))


@pytest.mark.parametrize(
    ("placement", "resources", "env"),
    [
        (ReplicaPlacement(node="n1", gpu_indices=(2, 3), gpu_milli=1000), {"nvidia.com/gpu": "2"}, {}),
        (
            ReplicaPlacement(node="n1", gpu_indices=(5,), gpu_milli=250),
            {},
            {"NVIDIA_VISIBLE_DEVICES": "5", "PORTAL_GPU_MILLI": "250"},
        ),
        (
            ReplicaPlacement(node="n1", gpu_indices=(1,), gpu_milli=125, mig_profile="1g.10gb", mig_slot=3),
            {"nvidia.com/mig-1g.10gb": "1"},
            {"PORTAL_MIG_PROFILE": "1g.10gb", "PORTAL_MIG_SLOT": "3"},
        ),
        (ReplicaPlacement(node="n1"), {}, {"NVIDIA_VISIBLE_DEVICES": "void"}),
    ],
)
def test_the_pod_carries_its_devices_in_requests_annotations_and_environment(placement, resources, env):
    pod = ko.pod_manifest(JOB, 1, placement, scheduler_name="gpu-portal", run_as_user=1000)
    container = pod["spec"]["containers"][0]
    variables = {e["name"]: e["value"] for e in container["env"]}
    limits = container["resources"]["limits"]
    assert pod["metadata"]["name"] == "job-42-a3-r1"
    assert pod["metadata"]["namespace"] == "team-vision"
    assert pod["spec"]["schedulerName"] == "gpu-portal"
    assert "nodeName" not in pod["spec"]  # bound through the Binding API
    assert pod["metadata"]["labels"][ko.LABEL_JOB] == "42"
    assert pod["metadata"]["labels"][ko.LABEL_TEAM] == "vision"
    assert pod["metadata"]["labels"][ko.LABEL_QUEUE] == "default"
    assert pod["metadata"]["annotations"][ko.ANN_DEVICES] == ",".join(map(str, placement.gpu_indices))
    assert limits["cpu"] == "4000m"
    assert limits["memory"] == "16384Mi"
    for key, value in resources.items():
        assert limits[key] == value
        assert container["resources"]["requests"][key] == value
    assert "nvidia.com/gpu" not in limits or "nvidia.com/gpu" in resources
    for key, value in env.items():
        assert variables[key] == value
    assert variables["PORTAL_GPU_DEVICES"] == ",".join(map(str, placement.gpu_indices))
    assert pod["spec"]["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert pod["spec"]["nodeSelector"] == {"pool": "a100"}


def test_every_pod_the_portal_builds_meets_the_restricted_profile():
    for placement in (
        ReplicaPlacement(node="n1", gpu_indices=(0,), gpu_milli=1000),
        ReplicaPlacement(node="n1", gpu_indices=(0,), gpu_milli=500),
        ReplicaPlacement(node="n1", gpu_indices=(0,), mig_profile="3g.40gb", mig_slot=4),
    ):
        pod = ko.pod_manifest(JOB, 0, placement, scheduler_name="gpu-portal", run_as_user=1000)
        assert pod_spec_violations(pod, namespace="team-vision") == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda s: s.update(hostNetwork=True), "hostNetwork is set"),
        (lambda s: s.update(hostPID=True), "hostPID is set"),
        (lambda s: s.update(volumes=[{"name": "root", "hostPath": {"path": "/"}}]), "uses hostPath"),
        (lambda s: s["containers"][0]["securityContext"].update(privileged=True), "is privileged"),
        (
            lambda s: s["containers"][0]["securityContext"].update(
                capabilities={"add": ["SYS_ADMIN"], "drop": ["ALL"]}
            ),
            "adds capability SYS_ADMIN",
        ),
        (lambda s: s["containers"][0]["securityContext"].update(allowPrivilegeEscalation=True), "PrivilegeEscalation"),
        (lambda s: s["containers"][0]["securityContext"].update(runAsNonRoot=False), "runAsNonRoot"),
        (lambda s: s["securityContext"].update(runAsUser=0), "root"),
        (lambda s: s["containers"][0].update(ports=[{"containerPort": 80, "hostPort": 80}]), "hostPort"),
        (lambda s: s["securityContext"].update(seccompProfile={"type": "Unconfined"}), "seccompProfile"),
    ],
)
def test_the_restricted_check_catches_each_escalation(change, expected):
    pod = ko.pod_manifest(JOB, 0, ReplicaPlacement(node="n1"), scheduler_name="gpu-portal", run_as_user=1000)
    change(pod["spec"])
    assert any(expected in v for v in pod_spec_violations(pod)), pod_spec_violations(pod)


def test_a_pod_in_another_namespace_is_a_violation():
    pod = ko.pod_manifest(JOB, 0, ReplicaPlacement(node="n1"), scheduler_name="gpu-portal", run_as_user=1000)
    assert pod_spec_violations(pod, namespace="team-nlp")


def test_job_requests_that_touch_pod_security_are_named_field_by_field():
    violations = job_request_violations(
        {
            "image": "x",
            "privileged": True,
            "hostNetwork": True,
            "pod": {"volumes": [{"hostPath": {"path": "/"}}]},
            "capabilities": {"add": ["NET_ADMIN"]},
            "namespace": "kube-system",
        },
        team_namespace="team-vision",
    )
    assert set(violations) == {"privileged", "hostNetwork", "pod.volumes", "capabilities", "namespace"}
    assert job_request_violations({"image": "x", "namespace": "team-vision"}, team_namespace="team-vision") == {}


T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def managed_pod(replica: int, phase: str, *, node: str = "n1", **status) -> dict:
    pod = ko.pod_manifest(JOB, replica, ReplicaPlacement(node=node), scheduler_name="gpu-portal", run_as_user=1000)
    pod["spec"]["nodeName"] = node
    pod["status"] = {"phase": phase, **status}
    return pod


def running(at: str) -> dict:
    return {"containerStatuses": [{"name": "main", "state": {"running": {"startedAt": at}}}]}


def finished(start: str, end: str, code: int = 0) -> dict:
    terminated = {"startedAt": start, "finishedAt": end, "exitCode": code, "reason": "Error" if code else "Completed"}
    return {"containerStatuses": [{"name": "main", "state": {"terminated": terminated}}]}


ACTIVE = ko.ActiveJob(job_id=42, attempt=3, state=JobState.ADMITTED, replicas=2, gang_size=2, requeue=True)


def test_a_gang_is_running_when_its_last_pod_starts():
    pods = [
        managed_pod(0, "Running", **running("2026-01-05T09:00:05Z")),
        managed_pod(1, "Running", **running("2026-01-05T09:00:09Z")),
    ]
    (obs,) = ko.job_observations([ACTIVE], pods, {"n1"}, now=T0)
    assert (obs.state, obs.at) == (JobState.RUNNING, datetime(2026, 1, 5, 9, 0, 9, tzinfo=UTC))
    assert ko.job_observations([ACTIVE], pods[:1], {"n1"}, now=T0) == []


def test_a_job_succeeds_when_every_pod_has_and_runs_first_if_never_seen_running():
    pods = [
        managed_pod(0, "Succeeded", **finished("2026-01-05T09:00:05Z", "2026-01-05T10:00:00Z")),
        managed_pod(1, "Succeeded", **finished("2026-01-05T09:00:06Z", "2026-01-05T10:00:30Z")),
    ]
    first, second = ko.job_observations([ACTIVE], pods, {"n1"}, now=T0)
    assert first.state == JobState.RUNNING
    assert (second.state, second.at) == (JobState.SUCCEEDED, datetime(2026, 1, 5, 10, 0, 30, tzinfo=UTC))


def test_a_non_zero_exit_fails_the_job_and_an_eviction_requeues_it():
    crashed = [managed_pod(0, "Failed", **finished("2026-01-05T09:00:05Z", "2026-01-05T09:10:00Z", code=137))]
    (obs,) = ko.job_observations([ACTIVE], crashed, {"n1"}, now=T0)
    assert obs.state == JobState.FAILED
    assert "exit code 137" in obs.reason
    evicted = [managed_pod(0, "Failed", reason="Evicted")]
    (obs,) = ko.job_observations([ACTIVE], evicted, {"n1"}, now=T0)
    assert obs.state == JobState.PENDING
    never = ko.ActiveJob(42, 3, JobState.RUNNING, 2, 2, requeue=False)
    (obs,) = ko.job_observations([never], evicted, {"n1"}, now=T0)
    assert obs.state == JobState.FAILED


def test_pods_on_a_vanished_node_or_gone_from_a_running_job_requeue_it():
    job = ko.ActiveJob(42, 3, JobState.RUNNING, 2, 2, requeue=True)
    pods = [managed_pod(0, "Running", node="gone"), managed_pod(1, "Running")]
    (obs,) = ko.job_observations([job], pods, {"n1"}, now=T0)
    assert obs.state == JobState.PENDING
    assert "node gone lost" in obs.reason
    (obs,) = ko.job_observations([job], pods[1:], {"n1"}, now=T0)
    assert "1 of 2 pods gone" in obs.reason


def test_pods_of_another_attempt_say_nothing_about_this_one():
    stale = [managed_pod(0, "Failed", reason="Evicted"), managed_pod(1, "Failed", reason="Evicted")]
    newer = ko.ActiveJob(42, 4, JobState.ADMITTED, 2, 2, requeue=True)
    assert ko.job_observations([newer], stale, {"n1"}, now=T0) == []


def test_foreign_pods_take_the_highest_devices_and_victims_in_grace_keep_theirs():
    nodes = [ko.gpu_node_from(node(gpus=8))]
    foreign = FakeKubeApi().add_foreign_pod("kube-system", "dcgm", "n1", gpus=2, cpu="500m", memory="1Gi")
    victim = managed_pod(0, "Running")
    victim["metadata"]["annotations"][ko.ANN_DEVICES] = "0,1"
    usage = ko.foreign_usage_from([foreign, victim], nodes, active=set())
    assert {u.gpu_indices for u in usage} == {(7, 6), (0, 1)}
    assert ko.foreign_usage_from([victim], nodes, active={(42, 3)}) == []


def test_foreign_pods_are_not_charged_to_devices_the_portals_jobs_already_hold():
    # Portal jobs hold 6 and 7 (and a victim in its grace period 5): charging the foreign pod's two
    # GPUs to 7 and 6 again would leave the engine seeing two free GPUs too many.
    nodes = [ko.gpu_node_from(node(gpus=8))]
    foreign = FakeKubeApi().add_foreign_pod("kube-system", "dcgm", "n1", gpus=2)
    victim = managed_pod(0, "Running")
    victim["metadata"]["annotations"][ko.ANN_DEVICES] = "5"
    usage = ko.foreign_usage_from([foreign, victim], nodes, active=set(), held={"n1": {6, 7}})
    assert [u.gpu_indices for u in usage] == [(4, 3), (5,)]
    crowded = ko.foreign_usage_from([foreign], nodes, active=set(), held={"n1": set(range(7))})
    assert [u.gpu_indices for u in crowded] == [(7, 6)]  # the books disagree: the count still holds
