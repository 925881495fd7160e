"""The pod of one replica: its devices in requests, annotations and environment; always restricted."""

from __future__ import annotations

import pytest

from scheduling.adapters.k8s.manifests import pod_manifest
from scheduling.adapters.k8s.pods import ANN_DEVICES, LABEL_JOB, LABEL_QUEUE, LABEL_TEAM
from scheduling.adapters.pod_security import pod_spec_violations
from scheduling.engine.model import ReplicaPlacement
from tests.scheduling.adapters.factories import JOB


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
    pod = pod_manifest(JOB, 1, placement, scheduler_name="gpu-portal", run_as_user=1000)
    container = pod["spec"]["containers"][0]
    variables = {e["name"]: e["value"] for e in container["env"]}
    limits = container["resources"]["limits"]
    assert pod["metadata"]["name"] == "job-42-a3-r1"
    assert pod["metadata"]["namespace"] == "team-vision"
    assert pod["spec"]["schedulerName"] == "gpu-portal"
    assert "nodeName" not in pod["spec"]  # bound through the Binding API
    assert pod["metadata"]["labels"][LABEL_JOB] == "42"
    assert pod["metadata"]["labels"][LABEL_TEAM] == "vision"
    assert pod["metadata"]["labels"][LABEL_QUEUE] == "default"
    assert pod["metadata"]["annotations"][ANN_DEVICES] == ",".join(map(str, placement.gpu_indices))
    assert limits["cpu"] == "4000m"
    assert limits["memory"] == "16384Mi"
    for key, value in resources.items():
        assert limits[key] == value
        assert container["resources"]["requests"][key] == value
    # Without whole devices the pod says so (nvidia.com/gpu: 0), so a namespace LimitRange's default
    # GPU never applies to it.
    assert limits["nvidia.com/gpu"] == resources.get("nvidia.com/gpu", "0")
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
        pod = pod_manifest(JOB, 0, placement, scheduler_name="gpu-portal", run_as_user=1000)
        assert pod_spec_violations(pod, namespace="team-vision") == []
