"""The REST API (``portal.api``): submit, list, cancel, isolation between teams, bad input, quotas."""

import pytest
from django.utils import timezone

from portal.jobs.models import FlavorQuota, Job, JobTransition, QuotaChange
from scheduling.adapters.simulated import SimulatedCluster
from scheduling.services import cycle_run

pytestmark = pytest.mark.django_db

JOB = {"queue": "default", "image": "pytorch:2.4", "gpu": 1, "command": "python train.py --epochs 3"}


def submit(client, **fields):
    return client.post("/api/v1/jobs/", {**JOB, **fields}, format="json")


def test_a_member_submits_lists_retrieves_and_cancels_a_job(api, world):
    alice = api("alice")
    created = submit(
        alice,
        name="resnet",
        gpu=2,
        allowed_gpu_models=["A100-80GB"],
        labels={"project": "atlas", "example.com/cc": "42"},
    )
    assert created.status_code == 201, created.json()
    body = created.json()
    assert body["state"] == "Pending"
    assert body["team"] == "vision"
    assert body["namespace"] == "team-vision"
    assert body["command"] == ["python", "train.py", "--epochs", "3"]
    assert body["allowed_gpu_models"] == ["A100-80GB"]
    assert body["priority_class"] == "default"
    assert body["labels"] == {"project": "atlas", "example.com/cc": "42"}
    assert [t["to_state"] for t in body["transitions"]] == ["Pending"]

    listed = alice.get("/api/v1/jobs/").json()
    assert listed["count"] == 1
    assert listed["results"][0]["id"] == body["id"]

    got = alice.get(f"/api/v1/jobs/{body['id']}/")
    assert got.status_code == 200

    cancelled = alice.post(f"/api/v1/jobs/{body['id']}/cancel/")
    assert cancelled.status_code == 200
    assert cancelled.json()["state"] == "Cancelled"
    again = alice.post(f"/api/v1/jobs/{body['id']}/cancel/")
    assert again.status_code == 409
    assert "Cancelled job cannot be cancelled" in again.json()["detail"]


def test_another_teams_job_answers_404_everywhere(api, world):
    job = world.submit("vision")
    bob = api("bob")
    assert bob.get(f"/api/v1/jobs/{job.pk}/").status_code == 404
    assert bob.post(f"/api/v1/jobs/{job.pk}/cancel/").status_code == 404
    assert bob.get("/api/v1/jobs/").json()["count"] == 0
    job.refresh_from_db()
    assert job.state == "Pending"


def test_a_platform_admin_sees_every_team(api, world):
    world.submit("vision")
    world.submit("nlp")
    assert api("admin").get("/api/v1/jobs/").json()["count"] == 2


def test_list_filters_by_state_team_and_queue_and_paginates(api, world):
    for _ in range(3):
        world.submit("vision")
    world.submit("nlp")
    Job.objects.filter(pk=Job.objects.order_by("id").first().pk).update(state="Cancelled")
    carol = api("carol")  # member of both teams
    assert carol.get("/api/v1/jobs/").json()["count"] == 4
    assert carol.get("/api/v1/jobs/?team=nlp").json()["count"] == 1
    assert carol.get("/api/v1/jobs/?state=Pending").json()["count"] == 3
    assert carol.get("/api/v1/jobs/?state=Pending&team=vision&queue=default").json()["count"] == 2
    bad = carol.get("/api/v1/jobs/?state=Sleeping")
    assert bad.status_code == 400
    assert "state" in bad.json()["errors"]
    page = carol.get("/api/v1/jobs/?page_size=3&page=1").json()
    assert page["count"] == 4
    assert len(page["results"]) == 3
    assert "page=2" in page["next"]
    assert len(carol.get("/api/v1/jobs/?page_size=3&page=2").json()["results"]) == 1


def test_unauthenticated_requests_are_refused(world):
    from rest_framework.test import APIClient

    assert APIClient().get("/api/v1/jobs/").status_code == 401


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"gpu": -1}, "gpu", "greater than or equal to 0"),
        ({"gpu": 100000}, "gpu", "less than or equal to 64"),
        ({"replicas": 0}, "replicas", "greater than or equal to 1"),
        ({"gpu": 1, "gpu_milli": 500}, "gpu_milli", "set only one of"),
        ({"gpu_milli": 1500, "gpu": 0}, "gpu_milli", "less than or equal to 999"),
        ({"allowed_gpu_models": ["B200"]}, "allowed_gpu_models", "unknown GPU model(s) ['B200']"),
        ({"image": ""}, "image", "may not be blank"),
        ({"queue": "nope"}, "queue", "has no queue 'nope'"),
        ({"team": "nlp"}, "team", "not a member"),
        ({"priority_class": "vip"}, "priority_class", "unknown priority class"),
        ({"min_available": 3, "replicas": 2}, "min_available", "exceeds replicas"),
        ({"mig_profile": "3g.40gb", "gpu": 0, "allowed_gpu_models": ["T4"]}, "mig_profile", "supports MIG"),
        ({"mig_profile": "huge", "gpu": 0}, "mig_profile", "not a MIG profile"),
        ({"cpu_milli": 0}, "cpu_milli", "greater than or equal to 1"),
        ({"runtime_s": 10**9}, "runtime_s", "less than or equal to"),
        ({"privileged": True}, "privileged", "restricted Pod Security Standard"),
        ({"hostPath": "/"}, "hostPath", "restricted Pod Security Standard"),
        ({"host_network": True}, "host_network", "restricted Pod Security Standard"),
        ({"namespace": "kube-system"}, "namespace", "run in namespace 'team-vision' only"),
        ({"tolerations": [{"key": "spot", "effect": "Sometimes"}]}, "tolerations", "not a valid choice"),
        ({"colour": "blue"}, "colour", "unknown field"),
        ({"pod": {"volumes": [{"hostPath": {"path": "/"}}]}}, "pod.volumes", "restricted Pod Security"),
        ({"spec": {"containers": [{"securityContext": {}}]}}, "spec.containers[0].securityContext", "restricted"),
        ({"capabilities": {"add": ["SYS_ADMIN"]}}, "capabilities", "restricted Pod Security Standard"),
        ({"labels": {"bad key!": "x"}}, "labels", "not a valid label key"),
        ({"labels": {"project": "has space"}}, "labels", "not a valid label value"),
        ({"node_selector": {"pool": "-x"}}, "node_selector", "not a valid label value"),
        ({"image": "not a valid image ref!!"}, "image", "not an image reference: it holds white space"),
        ({"image": "Pytorch:2.4"}, "image", "repository name must be lower case"),
        ({"image": "registry.example.com//x"}, "image", "is not an image reference like"),
        ({"image": "pytorch:-bad-tag"}, "image", "is not an image reference like"),
        ({"kind": "training", "replicas": 4, "min_available": 2}, "min_available", "start together or not at all"),
        ({"kind": "cron"}, "kind", "not a valid choice"),
        ({"max_restarts": 101}, "max_restarts", "less than or equal to 100"),
        ({"checkpoint_path": "/ckpt\nx"}, "checkpoint_path", "line breaks"),
        ({"checkpoint_path": "x" * 1025}, "checkpoint_path", "no more than 1024"),
        ({"spot": "perhaps"}, "spot", "Must be a valid boolean"),
    ],
)
def test_bad_input_gets_a_400_naming_the_field_and_writes_nothing(api, world, fields, field, message):
    response = submit(api("alice"), **fields)
    assert response.status_code == 400, response.content
    body = response.json()
    assert field in body["errors"], body
    assert message in str(body["errors"][field]), body
    assert Job.objects.count() == 0
    assert JobTransition.objects.count() == 0


def test_a_queue_of_another_team_is_refused(api, world):
    response = submit(api("alice"), queue="nlp/default")
    assert response.status_code == 400
    assert "not a member" in str(response.json()["errors"]["team"])


def test_malformed_json_is_a_400_not_a_500(api, world):
    response = api("alice").post("/api/v1/jobs/", data="{not json", content_type="application/json")
    assert response.status_code == 400
    assert "JSON parse error" in response.json()["detail"]
    array = api("alice").post("/api/v1/jobs/", data="[1, 2]", content_type="application/json")
    assert array.status_code == 400


def test_max_pending_jobs_per_queue_is_enforced_at_submission(api, world):
    world.queues["vision"].max_pending_jobs = 2
    world.queues["vision"].save()
    alice = api("alice")
    assert submit(alice).status_code == 201
    assert submit(alice).status_code == 201
    refused = submit(alice)
    assert refused.status_code == 409
    assert "queue default already has 2 pending jobs, its limit is 2" in refused.json()["errors"]["queue"][0]
    assert Job.objects.count() == 2


def test_a_member_of_several_teams_must_name_the_team(api, world):
    carol = api("carol")
    assert "team" in submit(carol).json()["errors"]
    assert submit(carol, team="nlp").json()["team"] == "nlp"
    assert submit(carol, queue="vision/default").json()["team"] == "vision"
    assert submit(carol, team="vision", queue="vision/default").json()["team"] == "vision"


def test_a_team_and_a_queue_of_another_team_conflict(api, world):
    response = submit(api("carol"), team="vision", queue="nlp/default")
    assert response.status_code == 400, response.json()
    assert "queue of team 'nlp', but team is 'vision'" in response.json()["errors"]["queue"][0]
    assert Job.objects.count() == 0


def test_only_platform_admins_edit_quotas_and_every_change_is_recorded(api, world):
    payload = {"flavors": {"A100-80GB": {"nominal_gpus": 12, "borrowing_limit": 4}}, "cpu_quota_milli": 64000}
    denied = api("alice").patch("/api/v1/cluster-queues/cq-vision/", payload, format="json")
    assert denied.status_code == 403
    assert QuotaChange.objects.count() == 0

    response = api("admin").patch("/api/v1/cluster-queues/cq-vision/", payload, format="json")
    assert response.status_code == 200, response.json()
    flavor = FlavorQuota.objects.get(cluster_queue__name="cq-vision", gpu_model__name="A100-80GB")
    assert (flavor.nominal_gpus, flavor.borrowing_limit) == (12, 4)
    changes = {(c.field, c.old_value, c.new_value, c.changed_by.username) for c in QuotaChange.objects.all()}
    assert changes == {
        ("A100-80GB nominal_gpus", "8", "12", "admin"),
        ("A100-80GB borrowing_limit", "", "4", "admin"),
        ("cpu_quota_milli", "", "64000", "admin"),
    }
    bad = api("admin").patch(
        "/api/v1/cluster-queues/cq-vision/", {"flavors": {"A100-80GB": {"nominal_gpus": -3}}}, format="json"
    )
    assert bad.status_code == 400
    assert "flavors" in bad.json()["errors"]


def test_a_misspelt_quota_field_is_refused_not_ignored(api, world):
    response = api("admin").patch(
        "/api/v1/cluster-queues/cq-vision/", {"flavors": {"A100-80GB": {"nominal": 3}}}, format="json"
    )
    assert response.status_code == 400, response.json()
    assert response.json()["errors"]["flavors"] == {"A100-80GB": {"nominal": ["unknown field"]}}
    assert QuotaChange.objects.count() == 0


def test_read_endpoints_for_notebooks(api, world):
    alice = api("alice")
    assert [t["slug"] for t in alice.get("/api/v1/teams/").json()["results"]] == ["vision"]
    queues = alice.get("/api/v1/queues/").json()["results"]
    assert queues == [
        {
            "name": "default",
            "team": "vision",
            "cluster_queue": "cq-vision",
            "weight": 1.0,
            "max_pending_jobs": None,
            "pending_jobs": 0,
            "active_jobs": 0,
        }
    ]
    models = [m["name"] for m in alice.get("/api/v1/gpu-models/").json()["results"]]
    assert models == ["A100-80GB", "T4"]
    classes = alice.get("/api/v1/priority-classes/").json()["results"]
    assert {c["name"]: c["min_runtime_s"] for c in classes} == {"critical": 0, "default": 0, "low": 0}
    cqs = alice.get("/api/v1/cluster-queues/").json()["results"]
    assert {cq["name"] for cq in cqs} == {"cq-vision", "cq-nlp"}
    one = alice.get("/api/v1/cluster-queues/cq-nlp/").json()
    assert [f["gpu_model"] for f in one["flavors"]] == ["A100-80GB", "T4"]
    assert alice.get("/api/v1/cluster-queues/nope/").status_code == 404
    assert api("admin").patch("/api/v1/cluster-queues/", {}, format="json").status_code == 405


def test_openapi_schema_and_docs_are_served_when_public(client, world, settings):
    settings.API_DOCS = "public"
    schema = client.get("/api/schema/")
    assert schema.status_code == 200
    assert b"/api/v1/jobs/" in schema.content
    client.force_login(world.users["alice"])
    docs = client.get("/api/docs/")
    assert docs.status_code == 200
    assert b"swagger" in docs.content.lower()


def test_members_cancel_their_own_jobs_and_team_admins_any_job_of_their_team(api, world):
    alices = world.submit("vision", owner="alice")
    carols = world.submit("vision", owner="carol")
    refused = api("carol").post(f"/api/v1/jobs/{alices.pk}/cancel/")  # carol is a plain member
    assert refused.status_code == 403
    assert "owner or an admin of its team" in refused.json()["detail"]
    assert api("carol").post(f"/api/v1/jobs/{carols.pk}/cancel/").status_code == 200
    other = world.submit("vision", owner="carol")
    assert api("alice").post(f"/api/v1/jobs/{other.pk}/cancel/").status_code == 200  # alice is team-admin
    assert api("admin").post(f"/api/v1/jobs/{alices.pk}/cancel/").status_code == 200


def _running(world, job):
    from django.utils import timezone

    from portal.jobs.models import ReplicaPlacement
    from portal.jobs.transitions import job_transition

    now = timezone.now()
    job_transition(job=job, to_state="Admitted", at=now)
    job_transition(job=job, to_state="Running", at=now, actor="cluster")
    Job.objects.filter(pk=job.pk).update(gpu_model=world.models["A100-80GB"])
    ReplicaPlacement.objects.create(job=job, replica=0, node="a100-0", gpu_indices=[0], gpu_milli=1000)


def test_job_and_cluster_queue_lists_cost_the_same_queries_for_any_number_of_jobs(api, world):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    alice = api("alice")
    alice.get("/api/v1/teams/")  # the token's first use is recorded (a write at most once a minute)

    def queries(url):
        with CaptureQueriesContext(connection) as captured:
            assert alice.get(url).status_code == 200
        return len(captured.captured_queries)

    _running(world, world.submit("vision"))
    few = {url: queries(url) for url in ("/api/v1/jobs/", "/api/v1/cluster-queues/")}
    for _ in range(3):
        _running(world, world.submit("vision"))
    assert {url: queries(url) for url in few} == few
    cqs = {cq["name"]: cq for cq in alice.get("/api/v1/cluster-queues/").json()["results"]}
    assert cqs["cq-vision"]["flavors"][0]["used_gpus"] == 4.0


@pytest.mark.parametrize("key", ["project", "example.com/cc", "a" * 64, "-a", "Ex.com/a", "x/y/z", "", "/a"])
@pytest.mark.parametrize("value", ["", "atlas", "a" * 64, "has space", "x-"])
def test_a_label_is_accepted_at_submission_exactly_when_the_pod_builder_accepts_it(key, value):
    from portal.jobs.services import label_problem
    from scheduling.adapters.k8s.pods import valid_label

    assert (label_problem(key, value) is None) == valid_label(key, value)


def test_a_quota_patch_that_adds_a_gpu_model_records_its_new_quota(api, world):
    from portal.jobs.models import GpuModel

    GpuModel.objects.create(name="H100-80GB", memory_gib=80)
    response = api("admin").patch("/api/v1/cluster-queues/cq-nlp/", {"flavors": {"H100-80GB": {}}}, format="json")
    assert response.status_code == 200, response.json()
    assert [(c.field, c.old_value, c.new_value) for c in QuotaChange.objects.all()] == [
        ("H100-80GB nominal_gpus", "", "0")
    ]
    assert QuotaChange.objects.get().changed_by == world.users["admin"]


def test_the_schema_and_docs_are_off_by_default_without_debug_and_can_require_a_login(client, world, settings):
    from django.conf import settings as live

    assert live.API_DOCS == "off"  # the tests run with DEBUG=0, as production does
    for path in ("/api/schema/", "/api/docs/", "/api/redoc/"):
        assert client.get(path).status_code == 404, path
    settings.API_DOCS = "authenticated"
    assert client.get("/api/schema/").status_code in (401, 403)
    client.force_login(world.users["bob"])
    assert client.get("/api/schema/").status_code == 200


def test_the_job_shape_carries_run_time_gpu_hours_cost_and_attempts_and_sorts_by_them(api, world, settings):
    from datetime import timedelta

    from django.utils import timezone

    from scheduling.adapters.simulated import SimulatedCluster
    from scheduling.services import cluster_sync, cycle_run

    settings.SIM_SPEEDUP = 1.0  # estimates are in the cluster's time scale: the backend's below
    alice = api("alice")
    small = submit(alice, name="small", gpu=1).json()["id"]
    big = submit(alice, name="big", gpu=4).json()["id"]
    waiting = submit(alice, name="waiting", gpu=8, replicas=2).json()["id"]  # waits for the other two
    backend = SimulatedCluster(speedup=1.0)
    start = timezone.now() - timedelta(minutes=10)
    cycle_run(now=start, backend=backend)
    cluster_sync(backend=backend, now=start + timedelta(seconds=1))
    body = alice.get(f"/api/v1/jobs/{big}/").json()
    assert body["state"] == "Running"
    assert body["run_s"] > 599
    assert float(body["gpu_hours"]) == pytest.approx(4 * body["run_s"] / 3600, abs=1e-5)
    assert float(body["cost_usd"]) > 0
    assert float(body["estimated_total_usd"]) > float(body["cost_usd"])  # 10 of its 60 minutes ran
    [attempt] = body["attempts"]
    assert attempt["number"] == 1
    assert attempt["gpus"] == "4.000000"
    assert len(attempt["placements"]) == 1
    assert attempt["cost_usd"] == body["cost_usd"]
    pending = alice.get(f"/api/v1/jobs/{waiting}/").json()
    assert (pending["attempts"], pending["cost_usd"], pending["estimated_total_usd"]) == ([], "0.000000", None)
    by_cost = [j["id"] for j in alice.get("/api/v1/jobs/?ordering=-cost").json()["results"]]
    assert by_cost == [big, small, waiting]
    assert [j["id"] for j in alice.get("/api/v1/jobs/?ordering=gpu_hours").json()["results"]] == [waiting, small, big]


# The world: 2 A100 nodes of 8 GPUs (96 cores, 1 TiB) and 1 T4 node of 4 (32 cores); queue cq-vision
# holds 8 A100s and 4 T4s nominal and may borrow as much again from cq-nlp in cohort research.
NEVER = "never fits as configured"


@pytest.mark.parametrize(
    ("fields", "field", "limit", "message"),
    [
        (
            {"gpu": 8, "replicas": 3, "allowed_gpu_models": ["A100-80GB"]},
            "gpu",
            "queue_ceiling",
            (
                f"quota: {NEVER}: needs 24 A100-80GB GPUs at once and queue cq-vision may hold at most 16 "
                "(nominal 8 + 8 it may borrow in cohort research)"
            ),
        ),
        (
            {"gpu": 16},
            "gpu",
            "largest_node",
            (
                f"placement: {NEVER}: on A100-80GB: one replica needs 16 A100-80GB GPUs and the largest A100-80GB node "
                "has 8; on T4: one replica needs 16 T4 GPUs and the largest T4 node has 4"
            ),
        ),
        (
            {"gpu": 1, "cpu_milli": 200_000, "allowed_gpu_models": ["A100-80GB"]},
            "cpu_milli",
            "largest_node",
            f"placement: {NEVER}: one replica needs 200 CPU cores and the largest A100-80GB node has 96",
        ),
        (
            {"gpu": 5, "replicas": 3, "allowed_gpu_models": ["A100-80GB"]},
            "replicas",
            "cluster_total",
            (
                f"gang: {NEVER}: all 3 replicas must start together and the 2 A100-80GB nodes that could run one hold "
                "at most 2 of them with nothing else running"
            ),
        ),
        (
            {"gpu": 0, "mig_profile": "3g.40gb", "allowed_gpu_models": ["A100-80GB"]},
            "mig_profile",
            "node_filters",
            f"placement: {NEVER}: none of the 2 A100-80GB nodes passes the job's filters: 2 MIG mode does not match",
        ),
        (
            {"node_selector": {"pool": "nope"}, "allowed_gpu_models": ["A100-80GB"]},
            "node_selector",
            "node_filters",
            (
                f"placement: {NEVER}: none of the 2 A100-80GB nodes passes the job's filters: "
                "2 node selector does not match"
            ),
        ),
    ],
)
def test_a_job_that_never_fits_is_refused_with_a_400_naming_the_limit(api, world, fields, field, limit, message):
    response = submit(api("alice"), **fields)
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["errors"] == {field: [message]}
    assert body["reason"]["waits"] is False
    assert body["reason"]["details"]["limit"] == limit
    assert Job.objects.count() == 0
    assert JobTransition.objects.count() == 0


def test_the_never_fits_answer_follows_every_change_of_nodes_and_quotas_between_submissions(api, world):
    """The submit's test is kept between submissions; each change below, made in this test's one
    transaction as an admin's would be, must show in the next answer as on a fresh read."""
    from scheduling.models import SimNode

    alice = api("alice")
    big = {"gpu": 16, "allowed_gpu_models": ["A100-80GB"]}
    assert submit(alice, **big).status_code == 400  # the largest A100 node has 8
    node = SimNode.objects.filter(gpu_model=world.models["A100-80GB"]).first()
    node.gpu_count = 16
    node.save()
    assert submit(alice, **big).status_code == 201
    node.gpu_count = 8
    node.save()
    assert submit(alice, **big).status_code == 400
    SimNode.objects.create(name="a100-big", gpu_model=world.models["A100-80GB"], gpu_count=16, cpu_milli=96_000,
                           memory_mib=1024 * 1024)  # fmt: skip
    assert submit(alice, **big).status_code == 201
    SimNode.objects.filter(name="a100-big").delete()
    assert submit(alice, **big).status_code == 400
    # A quota change: the queue may hold at most 16 A100s (8 + 8 borrowed); 3 replicas of 8 never fit.
    gang = {"gpu": 8, "replicas": 3, "allowed_gpu_models": ["A100-80GB"]}
    assert submit(alice, **gang).json()["reason"]["details"]["limit"] == "queue_ceiling"
    FlavorQuota.objects.filter(cluster_queue=world.cluster_queues["vision"]).update(nominal_gpus=24)
    refused = submit(alice, **gang)
    assert refused.status_code == 400
    assert refused.json()["reason"]["details"]["limit"] == "cluster_total"  # now the 2 A100 nodes' 16 GPUs


def test_a_gpu_model_no_node_has_is_named(api, world):
    from portal.jobs.models import GpuModel

    h100 = GpuModel.objects.create(name="H100-80GB", memory_gib=80)
    FlavorQuota.objects.create(cluster_queue=world.cluster_queues["vision"], gpu_model=h100, nominal_gpus=8, order=2)
    response = submit(api("alice"), allowed_gpu_models=["H100-80GB"])
    assert response.status_code == 400
    assert response.json()["errors"] == {
        "allowed_gpu_models": [f"placement: {NEVER}: no node has GPU model H100-80GB (the cluster has A100-80GB, T4)"]
    }


def test_a_job_that_fits_the_empty_cluster_is_accepted_however_busy_it_is(api, world):
    alice = api("alice")
    assert submit(alice, gpu=8, replicas=2, allowed_gpu_models=["A100-80GB"]).status_code == 201
    assert submit(alice, gpu=8, replicas=2, allowed_gpu_models=["A100-80GB"]).status_code == 201  # waits


def test_on_an_autoscaling_cluster_a_never_fitting_job_queues_and_says_waiting_will_not_help(api, world, settings):
    from django.utils import timezone

    from scheduling.adapters.simulated import SimulatedCluster
    from scheduling.services import cycle_run

    settings.QUEUE_NEVER_FITTING_JOBS = True
    alice = api("alice")
    created = submit(alice, gpu=16, allowed_gpu_models=["A100-80GB"])
    assert created.status_code == 201
    cycle_run(now=timezone.now(), backend=SimulatedCluster())
    reason = alice.get(f"/api/v1/jobs/{created.json()['id']}/").json()["pending_reason"]
    assert reason["waits"] is False
    assert reason["message"] == (
        f"placement: {NEVER}: one replica needs 16 A100-80GB GPUs and the largest A100-80GB node has 8"
    )
    assert reason["details"]["limit"] == "largest_node"


def test_a_mig_profile_the_catalogue_lists_but_nvidias_table_lacks_is_refused_with_a_400(api, world):
    a100 = world.models["A100-80GB"]
    a100.mig_profiles = [*a100.mig_profiles, "3g.20gb"]  # an A100-40GB profile, typed in by mistake
    a100.save()
    response = submit(api("alice"), gpu=0, mig_profile="3g.20gb", allowed_gpu_models=["A100-80GB"])
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["reason"]["waits"] is False
    assert body["reason"]["details"]["limit"] == "catalogue"
    assert "MIG profile 3g.20gb is not in NVIDIA's MIG table for A100-80GB" in body["errors"]["mig_profile"][0]
    assert Job.objects.count() == 0


def test_a_plus_me_profile_is_accepted_and_only_one_runs_per_gpu(api, world):
    from django.utils import timezone

    from scheduling.adapters.simulated import SimulatedCluster
    from scheduling.models import SimNode
    from scheduling.services import cycle_run

    a100 = world.models["A100-80GB"]
    a100.mig_profiles = [*a100.mig_profiles, "1g.10gb+me"]
    a100.save()
    SimNode.objects.create(
        name="a100-mig", gpu_model=a100, gpu_count=1, cpu_milli=32_000, memory_mib=256 * 1024, mig_enabled=True
    )
    alice = api("alice")
    fields = {"gpu": 0, "mig_profile": "1g.10gb+me", "allowed_gpu_models": ["A100-80GB"], "runtime_s": 86_400}
    ids = [submit(alice, **fields).json()["id"] for _ in range(2)]
    plain = submit(alice, **{**fields, "mig_profile": "1g.10gb"}).json()["id"]
    cycle_run(now=timezone.now(), backend=SimulatedCluster())
    states = {pk: Job.objects.get(pk=pk).state for pk in [*ids, plain]}
    assert sorted(states.values()) == ["Admitted", "Admitted", "Pending"]
    assert states[plain] == "Admitted"  # the second +me waits: one per GPU
    (waiting,) = [pk for pk in ids if states[pk] == "Pending"]
    assert (
        "no free MIG slice for 1g.10gb+me" in alice.get(f"/api/v1/jobs/{waiting}/").json()["pending_reason"]["message"]
    )


def test_a_quota_cut_below_current_use_answers_with_a_warning(api, world):
    from tests.portal.ops.placing import place

    place(world.submit("vision", gpu=3), "a100-0", (0, 1, 2))
    cut = api("admin").patch(
        "/api/v1/cluster-queues/cq-vision/", {"flavors": {"A100-80GB": {"nominal_gpus": 2}}}, format="json"
    )
    assert cut.status_code == 200, cut.json()
    expected = (
        "cq-vision: the nominal quota of A100-80GB (2 GPUs) is below its current use (3); the excess is borrowed "
        "from its cohort."
    )
    assert cut.json()["warnings"] == [expected]
    fine = api("admin").patch(
        "/api/v1/cluster-queues/cq-vision/", {"flavors": {"A100-80GB": {"nominal_gpus": 3}}}, format="json"
    )
    assert fine.json()["warnings"] == []


def test_the_job_list_and_a_job_read_a_fixed_number_of_queries(api, world, django_assert_num_queries):
    """Token, the user's teams, (the count and) the page, then one query per relation: placements,
    attempts, transitions, allowed GPU models, and the price book for the attempts' costs."""
    alice = api("alice")
    alice.get("/api/v1/teams/")  # the token's first use is recorded (a write at most once a minute)
    job = world.submit("vision", gpu=1)
    world.submit("vision", gpu=2)
    world.submit("nlp", gpu=1)  # another team's: neither listed nor counted
    cycle_run(now=timezone.now(), backend=SimulatedCluster())
    with django_assert_num_queries(2 + 2 + 5):
        page = alice.get("/api/v1/jobs/").json()
    assert page["count"] == 2
    assert {row["id"] for row in page["results"]} == set(
        Job.objects.filter(team__slug="vision").values_list("id", flat=True)
    )
    with django_assert_num_queries(2 + 1 + 5):
        assert alice.get(f"/api/v1/jobs/{job.pk}/").json()["id"] == job.pk
    other = Job.objects.get(team__slug="nlp")
    with django_assert_num_queries(2 + 1):  # not one of her teams' jobs: nothing more is read
        assert alice.get(f"/api/v1/jobs/{other.pk}/").status_code == 404
