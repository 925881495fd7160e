"""The cluster page's selector against a hand-built cluster; every figure worked out by hand."""

from __future__ import annotations

import pytest

from portal.ops.selectors import cluster_view, node_view
from scheduling.models import SimNode
from tests.portal.ops.placing import place

pytestmark = pytest.mark.django_db


@pytest.fixture
def busy(world):
    """a100-0: job 1 (vision) on GPUs 0-1, GPU 2 shared by job 2 (vision, 0.25) and job 3 (nlp, 0.5);
    a100-1 (cordoned): job 4 (nlp) on GPU 0; one pending vision job."""
    jobs = {
        1: place(world.submit("vision", name="v-whole", gpu=2), "a100-0", (0, 1)),
        2: place(world.submit("vision", name="v-quarter", gpu=0, gpu_milli=250), "a100-0", (2,), milli=250),
        3: place(world.submit("nlp", name="n-half", gpu=0, gpu_milli=500), "a100-0", (2,), milli=500),
        4: place(world.submit("nlp", name="n-one", gpu=1), "a100-1", (0,)),
        5: world.submit("vision", name="v-waiting", gpu=1),
    }
    SimNode.objects.filter(name="a100-1").update(unschedulable=True)
    return jobs


def _node(view, name):
    return next(n for n in view["nodes"] if n["name"] == name)


def test_every_gpu_shows_its_holders_and_a_team_member_sees_only_their_teams_job_names(world, busy):
    view = cluster_view(user=world.users["alice"])
    a0 = _node(view, "a100-0")
    assert [g["state"] for g in a0["gpus"]] == ["whole", "whole", "shared"] + ["free"] * 5
    assert a0["gpus"][0]["holders"][0]["job"] == busy[1].pk
    shared = a0["gpus"][2]
    assert shared["fill_pct"] == 75
    labels = sorted(h["label"] for h in shared["holders"])
    assert labels == ["another team's job", f"job {busy[2].pk} v-quarter"]
    assert (a0["jobs"], a0["my_jobs"]) == (3, 2)
    a1 = _node(view, "a100-1")
    assert (a1["cordoned"], a1["state"]) == (True, "cordoned")
    assert a1["gpus"][0]["holders"][0] == {
        "job": None, "label": "another team's job", "team": "", "milli": 1000, "mig_profile": "", "mig_slot": None,
        "mine": False,
    }  # fmt: skip
    assert "n-half" not in str(view)
    assert "n-one" not in str(view)
    # A platform admin sees every name.
    assert "n-half" in str(cluster_view(user=world.users["admin"]))


def test_per_model_totals_and_fgd_fragmentation_match_a_hand_computation(world, busy):
    models = {m["gpu_model"]: m for m in cluster_view(user=world.users["admin"])["models"]}
    a100 = models["A100-80GB"]
    assert (a100["nodes"], a100["gpus"]) == (2, 16)
    assert a100["allocated_gpus"] == 3.75  # 2 + 0.25 + 0.5 + 1
    assert a100["free_whole_gpus"] == 5  # a100-0's GPUs 3-7; a100-1 is cordoned
    assert a100["free_fragment_gpus"] == 0.25
    assert a100["cordoned_free_gpus"] == 7
    # Job mix (one shape per replica): 1 GPU x2 (jobs 4, 5), 2 GPUs, 0.5, 0.25 -> frequencies 2/5, 1/5 each.
    # a100-0 free: 250 on GPU 2, 1000 on GPUs 3-7. Every whole-GPU shape and 0.5 fit elsewhere but cannot
    # use GPU 2's 250 (fragmented); 0.25 fits on it. FGD = (2/5 + 1/5 + 1/5) * 250 = 200 milli.
    assert a100["fragmentation_gpus"] == 0.2
    assert a100["fragmentation_pct"] == round(100 * 200 / 5250, 1)
    t4 = models["T4"]
    assert (t4["gpus"], t4["allocated_gpus"], t4["free_whole_gpus"], t4["fragmentation_gpus"]) == (4, 0, 4, 0)


def test_filters_narrow_the_nodes_not_the_totals(world, busy):
    view = cluster_view(user=world.users["alice"], gpu_model="T4")
    assert [n["name"] for n in view["nodes"]] == ["t4-0"]
    assert len(view["models"]) == 2
    assert [n["name"] for n in cluster_view(user=world.users["alice"], state="cordoned")["nodes"]] == ["a100-1"]
    assert [n["name"] for n in cluster_view(user=world.users["alice"], state="spot")["nodes"]] == ["t4-0"]
    assert [n["name"] for n in cluster_view(user=world.users["alice"], state="partial")["nodes"]] == ["a100-0"]
    assert cluster_view(user=world.users["alice"], rack="r9")["nodes"] == []
    assert view["choices"]["gpu_model"] == ["A100-80GB", "T4"]


def test_a_nodes_page_lists_the_users_jobs_and_counts_the_others(world, busy):
    node = node_view(user=world.users["bob"], name="a100-0")
    assert [j["id"] for j in node["job_list"]] == [busy[3].pk]
    assert node["hidden_jobs"] == 2
    assert node_view(user=world.users["bob"], name="no-such-node") is None


def test_a_model_in_a_pool_that_overcommits_fractions_says_by_how_much_its_columns_exceed_its_gpus(world):
    # t4-0 (4 T4 GPUs) in a pool handing out 1.25 GPUs of fractions per device; one 0.25 job on GPU 0:
    # allocated 0.25, free whole 3, free in fragments 1.25 - 0.25 = 1.0: 4.25 of 4 GPUs, 0.25 beyond.
    from decimal import Decimal

    from scheduling.models import NodePool

    NodePool.objects.create(name="notebooks", node_selector={"pool": "notebooks"}, overcommit_ratio=Decimal("1.25"))
    SimNode.objects.filter(name="t4-0").update(labels={"pool": "notebooks"})
    place(world.submit("vision", name="nb", gpu=0, gpu_milli=250), "t4-0", (0,), milli=250, model="T4")
    t4 = next(m for m in cluster_view(user=world.users["admin"])["models"] if m["gpu_model"] == "T4")
    assert (t4["allocated_gpus"], t4["free_whole_gpus"], t4["free_fragment_gpus"]) == (0.25, 3, 1.0)
    assert t4["overcommit_gpus"] == 0.25
    a100 = next(m for m in cluster_view(user=world.users["admin"])["models"] if m["gpu_model"] == "A100-80GB")
    assert a100["overcommit_gpus"] == 0


def test_fragmentation_on_a_pool_that_overcommits_fractions_is_counted_in_physical_gpus(world):
    # t4-0 (4 T4 GPUs, empty) in a 1.25 pool; the only job mix is whole A100 GPUs, which cannot use a T4:
    # every free T4 GPU is fragmented for every typical pod: 4 GPUs, 100 % of free (not 5 = 4 x 1.25).
    from decimal import Decimal

    from scheduling.models import NodePool

    NodePool.objects.create(name="notebooks", node_selector={"pool": "notebooks"}, overcommit_ratio=Decimal("1.25"))
    SimNode.objects.filter(name="t4-0").update(labels={"pool": "notebooks"})
    world.submit("vision", name="wants-a100", gpu=1, allowed_gpu_models=(world.models["A100-80GB"],))
    t4 = next(m for m in cluster_view(user=world.users["admin"])["models"] if m["gpu_model"] == "T4")
    assert (t4["gpus"], t4["free_whole_gpus"]) == (4, 4)
    assert (t4["fragmentation_gpus"], t4["fragmentation_pct"]) == (4.0, 100.0)
