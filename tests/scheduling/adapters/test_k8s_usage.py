"""Capacity held by pods outside the portal's active job attempts."""

from __future__ import annotations

from scheduling.adapters.k8s.nodes import gpu_node_from
from scheduling.adapters.k8s.pods import ANN_DEVICES
from scheduling.adapters.k8s.usage import foreign_usage_from
from tests.scheduling.adapters.factories import managed_pod, node
from tests.scheduling.adapters.fakeapi import FakeKubeApi


def test_foreign_pods_take_the_highest_devices_and_victims_in_grace_keep_theirs():
    nodes = [gpu_node_from(node(gpus=8))]
    foreign = FakeKubeApi().add_foreign_pod("kube-system", "dcgm", "n1", gpus=2, cpu="500m", memory="1Gi")
    victim = managed_pod(0, "Running")
    victim["metadata"]["annotations"][ANN_DEVICES] = "0,1"
    usage = foreign_usage_from([foreign, victim], nodes, active=set())
    assert {u.gpu_indices for u in usage} == {(7, 6), (0, 1)}
    assert foreign_usage_from([victim], nodes, active={(42, 3)}) == []


def test_foreign_pods_are_not_charged_to_devices_the_portals_jobs_already_hold():
    # Portal jobs hold 6 and 7 (and a victim in its grace period 5): charging the foreign pod's two
    # GPUs to 7 and 6 again would leave the engine seeing two free GPUs too many.
    nodes = [gpu_node_from(node(gpus=8))]
    foreign = FakeKubeApi().add_foreign_pod("kube-system", "dcgm", "n1", gpus=2)
    victim = managed_pod(0, "Running")
    victim["metadata"]["annotations"][ANN_DEVICES] = "5"
    usage = foreign_usage_from([foreign, victim], nodes, active=set(), held={"n1": {6, 7}})
    assert [u.gpu_indices for u in usage] == [(4, 3), (5,)]
    crowded = foreign_usage_from([foreign], nodes, active=set(), held={"n1": set(range(7))})
    assert [u.gpu_indices for u in crowded] == [(7, 6)]  # the books disagree: the count still holds
