"""Writes of platform operations: the audit trail and the periodic queue samples."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.utils import timezone

from portal.ops.models import AuditEntry, QueueSample
from portal.ops.selectors.queues import queue_standings_now


def audit_record(
    *,
    by,
    action: str,
    target_type: str,
    target_id: object = "",
    target: str = "",
    field: str = "",
    old: object = "",
    new: object = "",
    note: str = "",
    at: datetime | None = None,
) -> AuditEntry:
    """Append one entry to the audit trail (callers write it in the transaction of the change)."""
    return AuditEntry.objects.create(
        at=at or timezone.now(),
        actor=by if getattr(by, "pk", None) else None,
        actor_name=getattr(by, "username", "") or str(by or ""),
        action=action,
        target_type=target_type,
        target_id=str(target_id)[:64],
        target=str(target)[:200],
        field=field[:100],
        old_value=_text(old),
        new_value=_text(new),
        note=note[:500],
    )


def _text(value: object) -> str:
    """A value as the trail writes it (a price as 0.2 whether it was typed 0.20 or read as 0.200000)."""
    if value is None:
        return ""
    if isinstance(value, Decimal):
        return format(value.normalize(), "f")
    return str(value)[:200]


def queue_sample_record(*, now: datetime | None = None) -> int:
    """Sample every ClusterQueue's quota, use, borrowing, lending and pending demand per GPU model."""
    at = now or timezone.now()
    standings = queue_standings_now()
    rows = [
        QueueSample(
            at=at,
            cluster_queue=queue.name,
            gpu_model=r.key.removeprefix("gpu/"),
            nominal_milli=r.nominal,
            used_milli=r.used,
            borrowed_milli=r.borrowed,
            lent_milli=r.lent,
            pending_milli=r.pending,
        )
        for queue in standings.cluster_queues
        for r in queue.resources
        if r.key.startswith("gpu/")
    ]
    QueueSample.objects.bulk_create(rows, ignore_conflicts=True)
    return len(rows)
