"""Samples and the audit trail; the trail and quota changes cannot be deleted or rewritten."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, transaction

from portal.jobs.models import QuotaChange
from portal.jobs.services import queue_quota_update
from portal.ops.models import AuditEntry, QueueSample
from portal.ops.services import audit_record, queue_sample_record
from tests.portal.ops.placing import place

pytestmark = pytest.mark.django_db


def test_a_sample_records_every_queues_quota_use_and_pending_per_gpu_model(world):
    place(world.submit("vision", gpu=3), "a100-0", (0, 1, 2))
    world.submit("nlp", gpu=2)
    assert queue_sample_record() == 4  # two queues x two GPU models
    rows = {(s.cluster_queue, s.gpu_model): s for s in QueueSample.objects.all()}
    vision = rows[("cq-vision", "A100-80GB")]
    assert (vision.nominal_milli, vision.used_milli, vision.pending_milli) == (8000, 3000, 0)
    assert rows[("cq-nlp", "A100-80GB")].pending_milli == 2000


def test_quota_changes_go_into_the_audit_trail_and_neither_can_be_deleted_or_rewritten(world):
    queue_quota_update(cluster_queue=world.cluster_queues["vision"], by=world.users["admin"],
                       flavors={"A100-80GB": {"nominal_gpus": 4}})  # fmt: skip
    entry = AuditEntry.objects.get(action="quota-change")
    assert (entry.field, entry.old_value, entry.new_value) == ("A100-80GB nominal_gpus", "8", "4")
    assert entry.actor_name == "admin"
    change = QuotaChange.objects.get()
    for attempt in (change.delete, entry.delete, lambda: AuditEntry.objects.filter(pk=entry.pk).update(new_value="9")):
        with pytest.raises(DatabaseError), transaction.atomic():
            attempt()
    assert AuditEntry.objects.filter(pk=entry.pk, new_value="4").exists()
    with pytest.raises(DatabaseError), transaction.atomic():
        world.cluster_queues["vision"].delete()  # PROTECT: its history stays


def test_an_audit_entry_keeps_the_actors_name(world):
    entry = audit_record(by=world.users["admin"], action="job-cancel", target_type="job", target_id=7, target="job 7")
    assert (entry.actor_name, entry.target_id) == ("admin", "7")
