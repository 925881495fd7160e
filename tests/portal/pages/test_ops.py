"""The cluster, node, queues and fair-share pages, and their data under /api/v1/."""

from __future__ import annotations

import pytest
from django.utils import timezone

from portal.ops.services import queue_sample_record
from tests.portal.ops.placing import place

pytestmark = pytest.mark.django_db


@pytest.fixture
def running(world):
    return {
        "vision": place(world.submit("vision", name="vis-train", gpu=2), "a100-0", (0, 1)),
        "nlp": place(world.submit("nlp", name="nlp-secret-run", gpu=0, gpu_milli=500), "a100-0", (2,), milli=500),
    }


def test_the_pages_need_a_login(client, world):
    for path in ("/cluster/", "/cluster/nodes/a100-0/", "/queues/", "/queues/charts/", "/queues/fair-share/"):
        assert client.get(path).status_code == 302


def test_the_cluster_page_shows_every_gpu_and_hides_other_teams_job_names(client, world, running):
    client.force_login(world.users["alice"])
    page = client.get("/cluster/").content.decode()
    assert page.count('class="gpu gpu-') == 8 + 8 + 4 + 5  # every GPU, plus the legend's five
    assert f'href="/jobs/{running["vision"].pk}/"' in page
    assert "nlp-secret-run" not in page
    assert f"/jobs/{running['nlp'].pk}/" not in page
    assert "another team&#x27;s job" in page
    assert 'href="/cluster/nodes/a100-0/"' in page
    assert "UTC" in page  # times carry their zone
    filtered = client.get("/cluster/", {"gpu_model": "T4"}).content.decode()
    assert "t4-0" in filtered
    assert "a100-1" not in filtered


def test_a_nodes_page_lists_your_jobs_and_counts_the_others(client, world, running):
    client.force_login(world.users["alice"])
    page = client.get("/cluster/nodes/a100-0/").content.decode()
    assert "vis-train" in page
    assert "nlp-secret-run" not in page
    assert "and 1 job of other teams" in page
    assert client.get("/cluster/nodes/nowhere/").status_code == 404


def test_the_queues_page_shows_standings_waits_heads_warnings_and_charts(client, world, running):
    queue_sample_record(now=timezone.now().replace(minute=0, second=0, microsecond=0))  # an hour's first sample
    client.force_login(world.users["bob"])
    page = client.get("/queues/").content.decode()
    assert "Nominal quotas of T4 add up to 8 GPUs, more than the 4 the cluster has." in page
    assert 'href="/queues/fair-share/"' in page
    assert 'hx-get="/queues/charts/"' in page  # the charts load after the page
    charts = client.get("/queues/charts/").content.decode()
    assert "cq-vision: use and pending demand vs quota" in charts  # a chart from the samples
    assert "Fair-share standing of each team" in page
    formula = client.get("/queues/fair-share/").content.decode()
    assert "share(u, P, w)" in formula


def test_the_api_answers_the_same_data(client, world, running, api):
    bob = api("bob")
    cluster = bob.get("/api/v1/cluster/", {"gpu_model": "A100-80GB"}).json()
    assert [n["name"] for n in cluster["nodes"]] == ["a100-0", "a100-1"]
    assert "vis-train" not in str(cluster)
    assert cluster["models"][0]["allocated_gpus"] == 2.5
    fairness = bob.get("/api/v1/fairness/").json()
    vision = next(q for q in fairness["cluster_queues"] if q["name"] == "cq-vision")
    a100 = next(r for r in vision["gpu_models"] if r["gpu_model"] == "A100-80GB")
    assert (a100["nominal_gpus"], a100["used_gpus"]) == (8, 2)
    assert vision["share"] == round(2000 / 16000, 4)  # 2 of the cohort's 16 A100
    assert set(fairness) == {"cluster_queues", "cohorts", "local_queues", "waits", "heads", "warnings"}
