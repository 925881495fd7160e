"""Allocation assembly (``billing.core.allocation``): idle shown or shared, exact totals."""

from __future__ import annotations

from billing.core.allocation import IDLE, IdleRow, UsageRow, UsageSums, allocation_assemble
from billing.core.units import GPU_HOUR
from tests.billing.conftest import utc


def test_idle_is_shared_in_proportion_to_usage():
    windows = [(utc(2026, 1, 1), utc(2026, 1, 1, 1))]
    hour = GPU_HOUR
    rows = [
        UsageRow("a", 0, "A100", "on-demand", UsageSums(gpu_usage=3 * hour)),
        UsageRow("b", 0, "A100", "on-demand", UsageSums(gpu_usage=1 * hour)),
    ]
    idle = [IdleRow(0, "A100", "on-demand", 4 * hour, 4 * hour * 4_000_000, 4 * hour)]  # 4 idle at $4
    shared = allocation_assemble(
        rows=rows, idle_rows=idle, windows=windows, aggregate="namespace", step_hours=1, show_idle=True, share_idle=True
    )
    assert shared.totals["a"].shared_idle_cost == 12
    assert shared.totals["b"].shared_idle_cost == 4
    shown = allocation_assemble(
        rows=rows,
        idle_rows=idle,
        windows=windows,
        aggregate="namespace",
        step_hours=1,
        show_idle=True,
        share_idle=False,
    )
    assert shown.totals[IDLE].gpu_hours == 4
    assert shown.totals[IDLE].gpu_cost == 16
