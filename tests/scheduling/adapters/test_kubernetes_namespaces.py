"""Team namespaces kept in step, over the in-test API server with the real client: the quota mirrors
the queues' ceilings (recomputed here from Kueue's rule, nominal + borrowing limit within the cohort),
drift made by hand is repaired by the next sync and reported."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from rest_framework.test import APIClient

from portal.jobs.models import ClusterQueue, FlavorQuota, GpuModel
from portal.tenants.models import Team
from scheduling.models import NamespaceObject
from scheduling.selectors import namespace_objects, namespace_objects_wanted
from scheduling.services import namespaces_sync_run
from tests.factories import build_world

NOW = datetime(2026, 1, 5, 12, tzinfo=UTC)
pytestmark = pytest.mark.django_db


@pytest.fixture
def nworld(db):
    world = build_world(a100_nodes=0, t4_nodes=0, nominal_a100=8)
    # vision may borrow at most 4 A100s from nlp's lendable 8; nlp may borrow all of vision's.
    FlavorQuota.objects.filter(cluster_queue=world.cluster_queues["vision"], gpu_model__name="A100-80GB").update(
        borrowing_limit=4
    )
    ClusterQueue.objects.filter(name="cq-vision").update(cpu_quota_milli=64_000, memory_quota_mib=256 * 1024)
    return world


def hard_of(namespace: str) -> dict[str, str]:
    return dict(next(o for o in namespace_objects_wanted() if o.namespace == namespace).hard)


def test_the_quota_mirrors_nominal_plus_the_borrowing_ceiling(nworld):
    vision = hard_of("team-vision")
    # A100: nominal 8 + borrowing limit 4 (nlp lends 8) = 12; T4: 4 + all of nlp's 4 = 8 -> 20 GPUs.
    assert vision["requests.nvidia.com/gpu"] == "20"
    # MIG on the A100 (80 GiB, 8 memory slices): a 1g.10gb slice charges 1/8 GPU -> 12 x 8 = 96
    # slices; a 3g.40gb charges 4/8 -> 24.
    assert vision["requests.nvidia.com/mig-1g.10gb"] == "96"
    assert vision["requests.nvidia.com/mig-3g.40gb"] == "24"
    # CPU and memory: vision limits them and nlp does not lend what it does not have (no quota): nominal.
    assert (vision["requests.cpu"], vision["requests.memory"]) == ("64", "256Gi")
    nlp = hard_of("team-nlp")
    # nlp: A100 8 + vision's 8 (no borrowing limit) = 16; T4 4 + 4 = 8 -> 24; CPU unlimited: left out.
    assert nlp["requests.nvidia.com/gpu"] == "24"
    assert "requests.cpu" not in nlp


def test_a_team_without_queues_may_request_no_gpu(nworld):
    Team.objects.create(name="Guests", slug="guests", namespace="team-guests")
    assert hard_of("team-guests") == {"requests.nvidia.com/gpu": "0"}


def test_the_sync_creates_then_leaves_alone_then_repairs_drift(nworld, kube, backend):
    reports = namespaces_sync_run(now=NOW, backend=backend)
    assert {(r.namespace, r.kind, r.action) for r in reports} == {
        ("team-vision", "ResourceQuota", "created"),
        ("team-vision", "LimitRange", "created"),
        ("team-nlp", "ResourceQuota", "created"),
        ("team-nlp", "LimitRange", "created"),
    }
    stored = kube.objects["ResourceQuota"][("team-vision", "gpu-portal-quota")]
    assert stored["spec"]["hard"]["requests.nvidia.com/gpu"] == "20"
    limits = kube.objects["LimitRange"][("team-vision", "gpu-portal-limits")]["spec"]["limits"][0]
    assert limits["default"] == {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"}  # the seed's ai-limits
    assert limits["defaultRequest"] == {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"}

    assert {r.action for r in namespaces_sync_run(now=NOW, backend=backend)} == {"none"}

    # Someone raises the quota by hand, and deletes nlp's LimitRange.
    edited = dict(stored)
    edited["spec"] = {"hard": {**stored["spec"]["hard"], "requests.nvidia.com/gpu": "64"}}
    kube.put_object("ResourceQuota", "team-vision", edited)
    del kube.objects["LimitRange"][("team-nlp", "gpu-portal-limits")]
    reports = {(r.namespace, r.kind): r for r in namespaces_sync_run(now=NOW, backend=backend)}
    assert reports[("team-vision", "ResourceQuota")].drift == ("hard requests.nvidia.com/gpu=64 (want 20)",)
    assert reports[("team-vision", "ResourceQuota")].action == "replaced"
    assert reports[("team-nlp", "LimitRange")].action == "created"
    assert (
        kube.objects["ResourceQuota"][("team-vision", "gpu-portal-quota")]["spec"]["hard"]["requests.nvidia.com/gpu"]
        == "20"
    )
    row = NamespaceObject.objects.get(namespace="team-vision", kind="ResourceQuota")
    assert (row.in_sync, row.repairs, row.action) == (False, 2, "replaced")
    assert row.drift == ["hard requests.nvidia.com/gpu=64 (want 20)"]
    assert [r.namespace for r in namespace_objects(namespaces=["team-nlp"])] == ["team-nlp", "team-nlp"]


def test_a_quota_change_reaches_the_namespace_on_the_next_sync(nworld, kube, backend):
    namespaces_sync_run(now=NOW, backend=backend)
    FlavorQuota.objects.filter(cluster_queue__name="cq-vision", gpu_model__name="T4").delete()
    reports = {(r.namespace, r.kind): r for r in namespaces_sync_run(now=NOW, backend=backend)}
    assert reports[("team-vision", "ResourceQuota")].action == "replaced"
    assert (
        kube.objects["ResourceQuota"][("team-vision", "gpu-portal-quota")]["spec"]["hard"]["requests.nvidia.com/gpu"]
        == "12"
    )


def test_an_api_error_on_one_namespace_is_reported_and_the_others_go_on(nworld, kube, backend):
    kube.fail("GET", r"/namespaces/team-nlp/resourcequotas/", status=403, times=1)
    reports = {(r.namespace, r.kind): r for r in namespaces_sync_run(now=NOW, backend=backend)}
    assert reports[("team-nlp", "ResourceQuota")].action.startswith("failed: HTTP 403")
    assert reports[("team-vision", "ResourceQuota")].action == "created"


def test_the_simulated_cluster_has_no_namespaces_to_sync(nworld):
    from scheduling.adapters.simulated import SimulatedCluster

    assert namespaces_sync_run(now=NOW, backend=SimulatedCluster()) is None


def test_a_gpu_model_no_queue_lists_does_not_count(nworld):
    GpuModel.objects.create(name="H100-80GB", memory_gib=80, mig_profiles=["1g.10gb"])
    assert hard_of("team-vision")["requests.nvidia.com/gpu"] == "20"


def test_drift_is_reported_in_metrics_and_the_api(nworld, kube, backend, client, settings):
    namespaces_sync_run(now=NOW, backend=backend)
    stored = kube.objects["LimitRange"][("team-vision", "gpu-portal-limits")]
    stored["spec"]["limits"][0]["default"]["memory"] = "1Ti"
    kube.put_object("LimitRange", "team-vision", stored)
    namespaces_sync_run(now=NOW, backend=backend)
    settings.METRICS_TOKEN = "s3cret"
    body = client.get("/metrics", headers={"Authorization": "Bearer s3cret"}).content.decode()
    assert 'portal_namespace_object_in_sync{kind="LimitRange",namespace="team-vision"} 0.0' in body
    assert 'portal_namespace_object_in_sync{kind="ResourceQuota",namespace="team-vision"} 1.0' in body
    assert 'portal_namespace_object_repairs_total{kind="LimitRange",namespace="team-vision"} 2.0' in body
    # A team member sees their own namespace's objects; the other team's are not listed.
    alice, admin = APIClient(), APIClient()
    alice.force_authenticate(nworld.users["alice"])
    admin.force_authenticate(nworld.users["admin"])
    rows = alice.get("/api/v1/namespaces/").json()["results"]
    assert {(r["namespace"], r["kind"]) for r in rows} == {
        ("team-vision", "ResourceQuota"),
        ("team-vision", "LimitRange"),
    }
    limit_range = next(r for r in rows if r["kind"] == "LimitRange")
    assert limit_range["in_sync"] is False
    assert limit_range["drift"] == ["default memory=1Ti (want 8Gi)"]
    assert limit_range["action"] == "replaced"
    assert limit_range["wanted"]["spec"]["limits"][0]["default"]["memory"] == "8Gi"
    assert len(admin.get("/api/v1/namespaces/").json()["results"]) == 4
