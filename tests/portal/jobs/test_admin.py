"""The jobs admin: bulk cancel, requeue and priority changes, each in the audit trail; quota changes
cannot be deleted; a quota change below current use or over the cluster is warned about."""

from __future__ import annotations

import pytest

from portal.jobs.errors import ServiceError
from portal.jobs.models import Job, JobAttempt, QuotaChange
from portal.jobs.services import job_priority_update, job_requeue
from portal.ops.models import AuditEntry
from tests.portal.ops.placing import place

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client, world):
    client.force_login(world.users["admin"])
    return client


def _action(client, action: str, jobs: list[Job]):
    return client.post("/admin/jobs/job/", {"action": action, "_selected_action": [j.pk for j in jobs]}, follow=True)


def test_bulk_requeue_stops_running_jobs_and_puts_them_back_and_refuses_pending_ones(world, admin_client):
    running = place(world.submit("vision", gpu=1), "a100-0", (0,))
    waiting = world.submit("nlp", gpu=1)
    page = _action(admin_client, "requeue_jobs", [running, waiting]).content.decode()
    assert f"1 job(s) requeued: {running.pk}" in page
    assert f"Job {waiting.pk}: a Pending job cannot be requeued" in page  # the admin capitalises messages
    running.refresh_from_db()
    assert running.state == "Pending"
    assert not running.placements.exists()
    attempt = JobAttempt.objects.get(job=running)
    assert (attempt.outcome, attempt.requeued, attempt.ended_at is not None) == ("Pending", True, True)
    entry = AuditEntry.objects.get(action="job-requeue")
    assert (entry.target_id, entry.old_value, entry.new_value, entry.actor_name) == (
        str(running.pk),
        "Running",
        "Pending",
        "admin",
    )


def test_bulk_cancel_and_priority_change_are_recorded_like_quota_changes(world, admin_client):
    a, b = world.submit("vision", gpu=1), world.submit("nlp", gpu=1)
    critical = world.priorities["critical"]
    _action(admin_client, f"priority_{critical.pk}", [a, b])
    assert set(Job.objects.filter(pk__in=[a.pk, b.pk]).values_list("priority_class__name", flat=True)) == {"critical"}
    changes = AuditEntry.objects.filter(action="job-priority").values_list("old_value", "new_value")
    assert list(changes) == [("default (500)", "critical (10000)")] * 2
    _action(admin_client, "cancel_jobs", [a])
    a.refresh_from_db()
    assert a.state == "Cancelled"
    assert AuditEntry.objects.filter(action="job-cancel", target_id=str(a.pk), new_value="Cancelled").exists()
    # The trail is shown in the admin with the time zone, and cannot be deleted there.
    trail = admin_client.get("/admin/ops/auditentry/").content.decode()
    assert " UTC" in trail
    assert admin_client.get(f"/admin/ops/auditentry/{AuditEntry.objects.first().pk}/delete/").status_code == 403


def test_only_platform_admins_requeue_or_reprioritise(world):
    job = place(world.submit("vision", gpu=1), "a100-0", (0,))
    with pytest.raises(ServiceError):
        job_requeue(job=job, by=world.users["alice"])
    with pytest.raises(ServiceError):
        job_priority_update(job=job, by=world.users["alice"], priority_class=world.priorities["low"])
    assert not AuditEntry.objects.exists()


def test_quota_changes_cannot_be_deleted_in_the_admin_and_a_change_below_use_is_warned(world, admin_client):
    place(world.submit("vision", gpu=3), "a100-0", (0, 1, 2))
    cq = world.cluster_queues["vision"]
    form = admin_client.get(f"/admin/jobs/clusterqueue/{cq.pk}/change/").context["adminform"].form
    data = {k: v for k, v in form.initial.items() if v is not None and k not in ("id",)}
    flavors = list(cq.flavors.order_by("order"))
    data.update({
        "name": cq.name, "cohort": cq.cohort, "weight": cq.weight,
        "flavors-TOTAL_FORMS": len(flavors), "flavors-INITIAL_FORMS": len(flavors),
        "flavors-MIN_NUM_FORMS": 0, "flavors-MAX_NUM_FORMS": 1000,
        "quota_changes-TOTAL_FORMS": 0, "quota_changes-INITIAL_FORMS": 0,
        "quota_changes-MIN_NUM_FORMS": 0, "quota_changes-MAX_NUM_FORMS": 1000,
    })  # fmt: skip
    for i, f in enumerate(flavors):
        data.update({
            f"flavors-{i}-id": f.pk, f"flavors-{i}-cluster_queue": cq.pk, f"flavors-{i}-gpu_model": f.gpu_model_id,
            f"flavors-{i}-nominal_gpus": 2 if f.gpu_model.name == "A100-80GB" else f.nominal_gpus,
            f"flavors-{i}-order": f.order,
        })  # fmt: skip
    data = {k: ("" if v is None else v) for k, v in data.items()}
    page = admin_client.post(f"/admin/jobs/clusterqueue/{cq.pk}/change/", data, follow=True).content.decode()
    assert "the nominal quota of A100-80GB (2 GPUs) is below its current use (3)" in page
    change = QuotaChange.objects.get(field="A100-80GB nominal_gpus")
    assert (change.old_value, change.new_value) == ("8", "2")
    assert admin_client.get(f"/admin/jobs/quotachange/{change.pk}/delete/").status_code == 403
    assert "Nominal quotas of T4" in admin_client.get("/admin/jobs/clusterqueue/").content.decode()
