"""Capacity snapshots: the cluster's GPUs per model and capacity type, recorded when they change."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from billing.models import CapacitySnapshot
from billing.selectors.capacity import capacity_latest
from scheduling.adapters.contract import ClusterBackend
from scheduling.selectors import gpu_capacity


def capacity_record(*, now: datetime | None = None, backend: ClusterBackend | None = None) -> int:
    """Record the cluster's GPUs per model and capacity type if they changed. Returns rows written.

    Capacity type comes from the node label ``settings.CAPACITY_TYPE_LABEL`` (on-demand when absent).
    Cordoned nodes still count: they are paid for, so their GPUs are idle capacity.
    """
    now = now or timezone.now()
    counts = gpu_capacity(backend=backend)
    with transaction.atomic():
        latest = capacity_latest()
        current = {key: gpus for key, (gpus, _) in counts.items()}
        if {k: v for k, v in latest.items() if v} == current:
            return 0
        rows = [
            CapacitySnapshot(at=now, gpu_model=model, capacity_type=ctype, gpu_count=gpus, node_count=nodes)
            for (model, ctype), (gpus, nodes) in sorted(counts.items())
        ]
        rows += [
            CapacitySnapshot(at=now, gpu_model=model, capacity_type=ctype, gpu_count=0)
            for (model, ctype), gpus in sorted(latest.items())
            if gpus and (model, ctype) not in counts
        ]
        # Two workers recording the same change at the same instant write the same figures: skip.
        CapacitySnapshot.objects.bulk_create(rows, ignore_conflicts=True)
    return len(rows)
