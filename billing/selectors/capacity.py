"""Recorded GPU capacity (``CapacitySnapshot``): the change points idle is measured from."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from billing.core.windows import Window
from billing.models import CapacitySnapshot


def capacity_changes(window: Window) -> dict[tuple[str, str], list[tuple[datetime, int]]]:
    """(time, GPUs) change points per (model, capacity type) that hold during the window: the last one
    before it and every one inside it."""
    start, end = window
    before = CapacitySnapshot.objects.filter(at__lt=start).order_by("-at").values_list("at", flat=True).first()
    snapshots = CapacitySnapshot.objects.filter(at__lt=end)
    if before is not None:
        snapshots = snapshots.filter(at__gte=before)
    changes: dict[tuple[str, str], list[tuple[datetime, int]]] = defaultdict(list)
    for at, model, ctype, gpus in snapshots.values_list("at", "gpu_model", "capacity_type", "gpu_count"):
        changes[(model, ctype)].append((at, gpus))
    return changes


def capacity_latest() -> dict[tuple[str, str], int]:
    """The newest recorded GPU count per (model, capacity type)."""
    latest: dict[tuple[str, str], int] = {}
    for model, ctype, gpus in CapacitySnapshot.objects.order_by("at", "id").values_list(
        "gpu_model", "capacity_type", "gpu_count"
    ):
        latest[(model, ctype)] = gpus
    return latest
