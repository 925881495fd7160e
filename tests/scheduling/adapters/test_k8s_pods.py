"""The portal's marks on its pods, read back: which job attempt a pod belongs to, which labels join them."""

from __future__ import annotations

from scheduling.adapters.k8s.pods import LABEL_ATTEMPT, pod_job_attempt, pod_name, user_labels
from tests.scheduling.adapters.factories import managed_pod
from tests.scheduling.adapters.fakecluster import FakeCluster


def test_a_portal_pod_names_its_job_attempt_and_a_foreign_pod_none():
    pod = managed_pod(1, "Running")
    assert pod["metadata"]["name"] == pod_name(42, 3, 1)
    assert pod_job_attempt(pod) == (42, 3)
    assert pod_job_attempt(FakeCluster().add_foreign_pod("kube-system", "dcgm", "n1")) is None
    pod["metadata"]["labels"][LABEL_ATTEMPT] = "latest"
    assert pod_job_attempt(pod) is None


def test_a_jobs_own_labels_are_kept_only_when_valid_and_not_the_portals():
    labels = [
        ("project", "vision-2026"),
        ("example.com/cost-center", "cc-42"),
        ("gpu-portal.io/team", "someone-else"),
        ("app.kubernetes.io/managed-by", "me"),
        ("bad key!", "x"),
        ("tier", "not valid!"),
    ]
    assert user_labels(labels) == {"project": "vision-2026", "example.com/cost-center": "cc-42"}
