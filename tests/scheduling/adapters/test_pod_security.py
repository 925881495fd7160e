"""The restricted Pod Security Standard: each escalation caught in a pod, and field by field in a job request."""

from __future__ import annotations

import pytest

from scheduling.adapters.k8s.manifests import pod_manifest
from scheduling.adapters.pod_security import job_request_violations, pod_spec_violations
from scheduling.engine.model import ReplicaPlacement
from tests.scheduling.adapters.factories import JOB


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
    pod = pod_manifest(JOB, 0, ReplicaPlacement(node="n1"), scheduler_name="gpu-portal", run_as_user=1000)
    change(pod["spec"])
    assert any(expected in v for v in pod_spec_violations(pod)), pod_spec_violations(pod)


def test_a_pod_in_another_namespace_is_a_violation():
    pod = pod_manifest(JOB, 0, ReplicaPlacement(node="n1"), scheduler_name="gpu-portal", run_as_user=1000)
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
