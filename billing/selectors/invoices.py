"""Invoices: a team's month, one line per GPU model and capacity type."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from billing.core.allocation import AllocationQuery, UsageSums, figures_exact
from billing.core.prices import PriceLookup
from billing.core.units import epoch_hour, hours_between
from billing.core.windows import invoice_month, month_start, next_month
from billing.selectors.allocation import record_rows
from billing.selectors.prices import price_segment_list
from billing.selectors.rollups import rollup_rows
from billing.selectors.usage import running_usage
from portal.tenants.models import Team


@dataclass(frozen=True, slots=True)
class InvoiceLine:
    gpu_model: str
    capacity_type: str
    gpu_hours: Decimal
    gpu_cost: Decimal
    cpu_core_hours: Decimal
    cpu_cost: Decimal
    ram_gib_hours: Decimal
    ram_cost: Decimal
    total_cost: Decimal


@dataclass(frozen=True, slots=True)
class Invoice:
    """A team's month: its lines, and whether the month is still in progress (running jobs counted up
    to now)."""

    month: datetime
    lines: list[InvoiceLine]
    partial: bool

    @property
    def total_cost(self) -> Decimal:
        return sum((line.total_cost for line in self.lines), start=Decimal(0))

    @property
    def gpu_hours(self) -> Decimal:
        return sum((line.gpu_hours for line in self.lines), start=Decimal(0))


def invoice_get(*, team: Team, month: datetime, now: datetime) -> Invoice:
    """The invoice of the month that begins at ``month`` (the first of a month, UTC)."""
    start = month_start(month)
    return Invoice(month, invoice_lines(team=team, month=month, now=now), start <= now < next_month(start))


def invoice_lines(*, team: Team, month: datetime, now: datetime) -> list[InvoiceLine]:
    """A team's month, one line per GPU model and capacity type (closed and running usage)."""
    start, end = invoice_month(month)
    query = AllocationQuery(
        start=start,
        end=end,
        step_hours=hours_between(start, end),
        aggregate="namespace",
        show_idle=False,
        team_ids=frozenset({team.pk}),
        include_running=start <= now < end,
    )
    segments = price_segment_list(epoch_hour(start), epoch_hour(end))
    per_line: dict[tuple[str, str], UsageSums] = defaultdict(UsageSums)
    for _key, _bucket, model, ctype, sums in rollup_rows(query, segments, by_model=True):
        per_line[(model, ctype)].add(sums)
    if query.include_running:
        prices = PriceLookup(segments)
        for row in record_rows(running_usage(now=now, team_ids=[team.pk]), query, prices, {team.pk: team}):
            per_line[(row.gpu_model, row.capacity_type)].add(row.sums)
    lines = []
    for (model, ctype), sums in sorted(per_line.items()):
        f = figures_exact(sums)
        lines.append(
            InvoiceLine(
                model or "CPU only", ctype, f.gpu_hours, f.gpu_cost, f.cpu_core_hours, f.cpu_cost,
                f.ram_gib_hours, f.ram_cost, f.total_cost,
            )
        )  # fmt: skip
    return lines
