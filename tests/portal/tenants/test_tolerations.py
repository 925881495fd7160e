"""Item 2: a team tolerates only the taints platform admins granted it; anything else is a 400."""

from __future__ import annotations

import pytest
from django.test import TestCase
from django.utils import timezone

from portal.jobs.models import Job
from portal.tenants.models import TolerationGrant
from portal.tenants.selectors import team_toleration_allowlist
from portal.tenants.tolerations import toleration_allowed
from scheduling.adapters.simulated import SimulatedCluster
from scheduling.models import SimNode
from scheduling.services import cycle_run

pytestmark = pytest.mark.django_db

JOB = {"queue": "default", "image": "pytorch:2.4", "gpu": 1}
SPOT = {"key": "karpenter.sh/capacity-type", "operator": "Equal", "value": "spot", "effect": "NoSchedule"}


def submit(client, **fields):
    return client.post("/api/v1/jobs/", {**JOB, **fields}, format="json")


def test_a_wildcard_toleration_is_refused_and_the_job_never_reaches_a_tainted_node(api, world):
    SimNode.objects.filter(name__startswith="a100").update(taints=[{"key": "dedicated", "value": "nlp"}])
    response = submit(api("alice"), tolerations=[{"operator": "Exists"}])
    assert response.status_code == 400, response.json()
    assert "tolerations" in response.json()["errors"]
    assert "* Exists (any effect) is not allowed for team 'vision'" in response.json()["detail"]
    assert Job.objects.count() == 0


def test_a_toleration_no_grant_covers_is_a_400_naming_it(api, world):
    response = submit(api("bob"), tolerations=[SPOT])
    assert response.status_code == 400
    assert "karpenter.sh/capacity-type=spot:NoSchedule is not allowed for team 'nlp'" in response.json()["detail"]


def test_a_granted_taint_is_tolerated_and_the_job_lands_on_the_tainted_node(api, world):
    SimNode.objects.filter(name__startswith="a100").update(
        taints=[{"key": "karpenter.sh/capacity-type", "value": "spot", "effect": "NoSchedule"}]
    )
    TolerationGrant.objects.create(team=world.teams["vision"], key="karpenter.sh/capacity-type", value="spot")
    response = submit(api("alice"), tolerations=[SPOT], allowed_gpu_models=["A100-80GB"])
    assert response.status_code == 201, response.json()
    with TestCase.captureOnCommitCallbacks(execute=True):
        cycle_run(now=timezone.now(), backend=SimulatedCluster())
    job = Job.objects.get()
    assert job.state in ("Admitted", "Running")
    assert job.placements.get().node.startswith("a100")
    # bob's team has no grant: the same toleration is refused for him.
    assert submit(api("bob"), tolerations=[SPOT]).status_code == 400


def test_an_empty_key_exists_needs_a_grant_of_every_taint(api, world):
    TolerationGrant.objects.create(team=world.teams["vision"], key="karpenter.sh/capacity-type")
    assert submit(api("alice"), tolerations=[{"operator": "Exists"}]).status_code == 400
    TolerationGrant.objects.create(team=world.teams["vision"], all_taints=True)
    assert submit(api("alice"), tolerations=[{"operator": "Exists"}]).status_code == 201


@pytest.mark.parametrize(
    ("grant", "toleration", "allowed"),
    [
        ({"key": "spot"}, {"key": "spot", "operator": "Exists"}, True),
        ({"key": "spot"}, {"key": "spot", "value": "yes"}, True),
        ({"key": "spot"}, {"key": "other", "operator": "Exists"}, False),
        ({"key": "spot", "value": "yes"}, {"key": "spot", "value": "yes"}, True),
        ({"key": "spot", "value": "yes"}, {"key": "spot", "value": "no"}, False),
        ({"key": "spot", "value": "yes"}, {"key": "spot", "operator": "Exists"}, False),  # any value
        ({"key": "spot", "effect": "NoSchedule"}, {"key": "spot", "operator": "Exists", "effect": "NoSchedule"}, True),
        ({"key": "spot", "effect": "NoSchedule"}, {"key": "spot", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "spot", "effect": "NoSchedule"}, {"key": "spot", "operator": "Exists"}, False),  # every effect
        ({"key": "spot"}, {"operator": "Exists"}, False),
        ({"all": True}, {"operator": "Exists"}, True),
    ],
)
def test_a_grant_covers_a_toleration_only_when_it_allows_all_the_toleration_tolerates(grant, toleration, allowed):
    full = {"key": "", "value": "", "effect": "", "all": False, **grant}
    assert toleration_allowed(toleration, [full]) is allowed


def test_the_allow_list_selector_returns_plain_data_for_every_team(world):
    TolerationGrant.objects.create(team=world.teams["vision"], key="spot", effect="NoSchedule", note="spot pool")
    TolerationGrant.objects.create(team=world.teams["nlp"], all_taints=True)
    assert team_toleration_allowlist() == {
        "nlp": ({"key": "", "value": "", "effect": "", "all": True},),
        "vision": ({"key": "spot", "value": "", "effect": "NoSchedule", "all": False},),
    }
    assert team_toleration_allowlist(team_slugs=["vision"]) == {
        "vision": ({"key": "spot", "value": "", "effect": "NoSchedule", "all": False},)
    }


def test_platform_admins_edit_the_allow_list_in_the_admin_and_the_change_is_recorded(client, world):
    from django.contrib.admin.models import LogEntry

    client.force_login(world.users["admin"])
    team = world.teams["nlp"]
    page = client.get(f"/admin/tenants/team/{team.pk}/change/")
    assert page.status_code == 200
    assert b"toleration_grants" in page.content
    form = {
        "name": team.name, "slug": team.slug, "namespace": team.namespace,
        "memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0",
        "toleration_grants-TOTAL_FORMS": "1", "toleration_grants-INITIAL_FORMS": "0",
        "toleration_grants-0-key": "karpenter.sh/capacity-type", "toleration_grants-0-value": "spot",
        "toleration_grants-0-effect": "", "toleration_grants-0-note": "spot pool",
    }  # fmt: skip
    saved = client.post(f"/admin/tenants/team/{team.pk}/change/", form)
    assert saved.status_code == 302, saved.content.decode()[:2000]
    assert team_toleration_allowlist(team_slugs=["nlp"])["nlp"][0]["key"] == "karpenter.sh/capacity-type"
    entry = LogEntry.objects.get(object_id=str(team.pk))
    assert "toleration grant" in entry.get_change_message().lower()
    assert entry.user == world.users["admin"]
