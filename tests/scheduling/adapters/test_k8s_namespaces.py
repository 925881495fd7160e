"""A namespace's ResourceQuota and LimitRange as the portal wants them, and drift by value."""

from __future__ import annotations

from scheduling.adapters.k8s.namespaces import (
    NamespaceObjects,
    cpu_quantity,
    limit_range_drift,
    limit_range_manifest,
    memory_quantity,
    quota_drift,
    resource_quota_manifest,
)

OBJECTS = NamespaceObjects(
    namespace="team-vision",
    hard=(("requests.cpu", "96"), ("requests.memory", "512Gi"), ("requests.nvidia.com/gpu", "16")),
    default=(("cpu", "4"), ("memory", "8Gi"), ("nvidia.com/gpu", "1")),
    default_request=(("cpu", "2"), ("memory", "4Gi"), ("nvidia.com/gpu", "1")),
)


def test_the_quota_and_limit_range_are_labelled_as_the_portals():
    quota = resource_quota_manifest(OBJECTS)
    assert quota["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpu-portal"}
    assert quota["spec"]["hard"]["requests.nvidia.com/gpu"] == "16"
    limits = limit_range_manifest(OBJECTS)["spec"]["limits"]
    assert limits == [
        {
            "type": "Container",
            "default": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"},
            "defaultRequest": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"},
        }
    ]


def test_an_equal_quota_written_another_way_has_no_drift():
    live = {
        "spec": {"hard": {"requests.cpu": "96000m", "requests.memory": "524288Mi", "requests.nvidia.com/gpu": "16"}}
    }
    assert quota_drift(live, OBJECTS) == []


def test_a_changed_missing_or_extra_resource_is_named():
    live = {"spec": {"hard": {"requests.cpu": "200", "requests.nvidia.com/gpu": "16", "pods": "10"}}}
    assert quota_drift(live, OBJECTS) == [
        "hard pods=10 not set by the portal",
        "hard requests.cpu=200 (want 96)",
        "hard requests.memory missing (want 512Gi)",
    ]
    assert quota_drift(None, OBJECTS) == ["absent"]


def test_a_limit_range_with_another_default_drifts():
    live = limit_range_manifest(OBJECTS)
    assert limit_range_drift(live, OBJECTS) == []
    live["spec"]["limits"][0]["default"]["nvidia.com/gpu"] = "2"
    assert limit_range_drift(live, OBJECTS) == ["default nvidia.com/gpu=2 (want 1)"]


def test_quantities_are_written_in_the_largest_exact_unit():
    assert (cpu_quantity(96_000), cpu_quantity(1_500)) == ("96", "1500m")
    assert (memory_quantity(512 * 1024), memory_quantity(1_500)) == ("512Gi", "1500Mi")
