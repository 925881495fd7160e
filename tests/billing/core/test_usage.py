"""Usage arithmetic (``billing.core.usage``): capacity over time, hour cutting, pricing."""

from __future__ import annotations

from billing.core.units import GPU_HOUR, epoch_hour
from billing.core.usage import capacity_usage
from tests.billing.conftest import utc


def test_capacity_holds_from_each_change_until_the_next():
    h0 = epoch_hour(utc(2026, 1, 1))
    changes = [(utc(2026, 1, 1, 0, 30), 8), (utc(2026, 1, 1, 2), 16), (utc(2026, 1, 1, 3, 15), 0)]
    usage = capacity_usage(changes, h0, h0 + 5)
    gpu_hour = GPU_HOUR
    assert usage == {h0: 4 * gpu_hour, h0 + 1: 8 * gpu_hour, h0 + 2: 16 * gpu_hour, h0 + 3: 4 * gpu_hour}
