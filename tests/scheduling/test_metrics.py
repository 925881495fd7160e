"""``scheduling.metrics``: /metrics in Kueue's style, and GPUs held counted as the engine charges quota."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.test import TestCase
from django.utils import timezone

from scheduling.adapters.simulated import SimulatedCluster
from scheduling.engine.mig import mig_geometry
from scheduling.metrics import _share
from scheduling.services import (
    cycle_run,
)


def test_metrics_are_exposed_in_kueue_style(world, client, settings):
    for _ in range(3):
        world.submit(gpu=8)
    world.submit(gpu=0, gpu_milli=500)
    with TestCase.captureOnCommitCallbacks(execute=True):
        cycle_run(now=timezone.now(), backend=SimulatedCluster())
    assert client.get("/metrics").status_code == 403  # closed while no token is configured
    settings.METRICS_TOKEN = "s3cret"
    body = client.get("/metrics", headers={"Authorization": "Bearer s3cret"}).content.decode()
    assert 'portal_pending_workloads{cluster_queue="cq-vision",local_queue="vision/default",reason=' in body
    assert 'portal_admitted_gpus{cluster_queue="cq-vision",gpu_model="A100-80GB",local_queue="vision/default"}' in body
    assert "portal_admission_wait_time_seconds_bucket" in body
    assert "portal_scheduling_cycle_duration_seconds_count 1.0" in body
    assert "portal_admitted_active_workloads" in body
    assert 'portal_admitted_workloads_total{cluster_queue="cq-vision"} 3.0' in body
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer s3cre"}).status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer s3cret"}).status_code == 200


@pytest.mark.parametrize(
    ("profile", "share"),
    [("1g.10gb", "0.125"), ("2g.20gb", "0.25"), ("3g.40gb", "0.5"), ("4g.40gb", "0.5"), ("7g.80gb", "1")],
)
def test_admitted_gpus_counts_a_mig_slice_as_the_quota_the_engine_charges_for_it(profile, share):
    assert _share([0], 0, profile, 80) == Decimal(share) == Decimal(mig_geometry(profile, 80).gpu_milli) / 1000
