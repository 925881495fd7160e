"""Reads of the hourly rollups for an allocation: usage priced in the database per step, exact window
totals, chart figures, and all tenants' GPU allocation (what idle is measured against).

``UsageHourly`` is priced against the price segments hour by hour; ``TeamCostHourly`` is already
priced (when ``cost_rollup_current``). The SQL is in ``billing.sql``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from billing import sql
from billing.core.allocation import AllocationQuery, UsageSums
from billing.core.prices import PriceSegment
from billing.core.units import CPU, GPU, MEMORY, decimal_units, epoch_hour
from billing.core.windows import Window
from portal.tenants.models import Team

RollupRow = tuple[tuple[Any, ...], int, str, str, UsageSums]
"""(group key, bucket, GPU model, capacity type, exact sums)"""


def _filter(query: AllocationQuery, alias: str = "r") -> tuple[str, list[Any]] | None:
    return sql.hours_filter(epoch_hour(query.start), epoch_hour(query.end), query.team_ids, alias)


def rollup_group(key: Sequence[Any], aggregate: str, teams: Mapping[int, Team]) -> str:
    """A group's name from its rollup key (``billing.sql.ROLLUP_AGGREGATES``)."""
    if aggregate in ("namespace", "team", "queue"):
        team = teams.get(key[0])
        name = (team.namespace if aggregate != "team" else team.slug) if team else str(key[0])
        return f"{name}/{key[1]}" if aggregate == "queue" else name
    if aggregate == "gpu_model":
        return key[0] or "cpu-only"
    return key[0]


def rollup_rows(query: AllocationQuery, segments: Sequence[PriceSegment], *, by_model: bool) -> list[RollupRow]:
    """Rollup sums per (group key, bucket[, model, capacity type]) with exact cost numerators, priced
    per row in the database."""
    found = _filter(query)
    if found is None:
        return []
    where, where_params = found
    group_cols = list(sql.ROLLUP_AGGREGATES.get(query.aggregate, ()))
    extra = ["r.gpu_model", "r.capacity_type"] if by_model else []
    cols = group_cols + [c for c in extra if c not in group_cols]
    cte, params = sql.price_segments_sql(segments)
    fetched = sql.fetch_all(
        sql.rollup_priced_sql(cte, cols, where), [*params, epoch_hour(query.start), query.step_hours, *where_params]
    )
    n = len(cols)
    model_at = cols.index("r.gpu_model") if by_model else None
    type_at = cols.index("r.capacity_type") if by_model else None
    out = []
    units = decimal_units
    for row in fetched:
        sums = UsageSums(
            gpu_usage=int(row[n + 1]),
            gpu_cost_units=units(row[n + 2]),
            cpu_milli_us=int(row[n + 3]),
            cpu_cost_units=units(row[n + 4]),
            memory_mib_us=int(row[n + 5]),
            memory_cost_units=units(row[n + 6]),
            util_usage=int(row[n + 7] or 0),
            util_measured_usage=int(row[n + 8] or 0),
        )
        model = row[model_at] if model_at is not None else ""
        ctype = row[type_at] if type_at is not None else ""
        out.append((tuple(row[: len(group_cols)]), int(row[n]), model, ctype, sums))
    return out


def rollup_totals(
    query: AllocationQuery, segments: Sequence[PriceSegment], teams: Mapping[int, Team]
) -> tuple[dict[str, UsageSums], set[str]]:
    """Exact window totals per group, and the GPU models found without a price segment.

    Summed per (group, model, capacity type, price segment) in SQL — bigint sums are exact — and
    priced here in integers, so a few hundred rows carry the whole window.
    """
    found = _filter(query)
    if found is None:
        return {}, set()
    where, where_params = found
    group_cols = sql.ROLLUP_AGGREGATES[query.aggregate]
    cte, params = sql.price_segments_sql(segments)
    fetched = sql.fetch_all(sql.rollup_per_segment_sql(cte, group_cols, where), [*params, *where_params])
    return priced_totals(fetched, len(group_cols), segments, lambda key: rollup_group(key, query.aggregate, teams))


def priced_totals(
    fetched: list[tuple[Any, ...]], n: int, segments: Sequence[PriceSegment], name_of: Callable[[tuple[Any, ...]], str]
) -> tuple[dict[str, UsageSums], set[str]]:
    """Rows of ``rollup_per_segment_sql`` (``n`` group columns) priced in integers and summed per group."""
    price = {(s.gpu_model, s.capacity_type, s.hour_from): s for s in segments}
    totals: dict[str, UsageSums] = {}
    unpriced: set[str] = set()
    for row in fetched:
        model, ctype, h0 = row[n], row[n + 1], row[n + 2]
        segment = price.get((model, ctype, h0))
        if segment is None:
            unpriced.add(model)
        gpu, cpu, memory = int(row[n + 3]), int(row[n + 4]), int(row[n + 5])
        group = name_of(tuple(row[:n]))
        sums = totals.get(group)
        if sums is None:
            sums = totals[group] = UsageSums()
        sums.gpu_usage += gpu
        sums.cpu_milli_us += cpu
        sums.memory_mib_us += memory
        if segment is not None:
            sums.gpu_cost_units += GPU.cost_units(gpu, segment.gpu_usd)
            sums.cpu_cost_units += CPU.cost_units(cpu, segment.cpu_usd)
            sums.memory_cost_units += MEMORY.cost_units(memory, segment.memory_usd)
        sums.util_usage += float(row[n + 6] or 0)
        sums.util_measured_usage += int(row[n + 7] or 0)
    return totals, unpriced


def group_aggregate(aggregate: str) -> tuple[str, str] | None:
    """(group column, label key) of an aggregate ``UsageGroupHourly`` answers (``owner``,
    ``label:<key>``), else None."""
    if aggregate == "owner":
        return sql.GROUP_AGGREGATES["owner"], ""
    if aggregate.startswith("label:"):
        return sql.GROUP_AGGREGATES["label"], aggregate.removeprefix("label:")
    return None


def group_totals(
    query: AllocationQuery, segments: Sequence[PriceSegment], names: Mapping[Any, str] | None = None
) -> tuple[dict[str, UsageSums], set[str]]:
    """``rollup_totals`` from the group rollup: per owner (named by ``names``, user id to username) or
    per value of a label."""
    found = _filter(query)
    group = group_aggregate(query.aggregate)
    if found is None or group is None:
        return {}, set()
    (where, where_params), (column, label_key) = found, group
    cte, params = sql.price_segments_sql(segments)
    key_cte, key_params = sql.group_key_sql(label_key)
    fetched = sql.fetch_all(
        sql.rollup_per_segment_sql(cte + key_cte, [column], where, table=sql.GROUP_HOURLY),
        [*params, *key_params, *where_params],
        window_scan=True,
    )
    return priced_totals(fetched, 1, segments, lambda key: names.get(key[0], str(key[0])) if names else key[0])


def group_label_set_rows(query: AllocationQuery, segments: Sequence[PriceSegment]) -> list[tuple[Any, ...]]:
    """Per (job owner, label set, model, capacity type, price segment): usage summed, one read of the group
    rollup that answers by owner, the label keys and by any label key (``GroupReads``). ``labels_text``
    stands for its set (``labels_hash`` is its hash): rows are ``(owner id, labels_text, model, capacity
    type, h0, *usage)``, priced by ``priced_totals`` with two key columns."""
    found = _filter(query)
    if found is None:
        return []
    where, where_params = found
    cte, params = sql.price_segments_sql(segments)
    key_cte, key_params = sql.group_key_sql("")
    return sql.fetch_all(
        sql.rollup_per_segment_sql(cte + key_cte, ["r.owner_id", "r.labels_text"], where, table=sql.GROUP_HOURLY),
        [*params, *key_params, *where_params],
        window_scan=True,
    )


def group_step_rows(query: AllocationQuery, segments: Sequence[PriceSegment]) -> list[tuple[Any, ...]]:
    """``rollup_step_rows`` from the group rollup: rows keyed by the owner's user id or the label value."""
    found = _filter(query)
    group = group_aggregate(query.aggregate)
    if found is None or group is None:
        return []
    (where, where_params), (column, label_key) = found, group
    cte, params = sql.price_segments_sql(segments, money="DOUBLE PRECISION")
    key_cte, key_params = sql.group_key_sql(label_key)
    return sql.fetch_binary(
        sql.group_step_figures_sql(cte + key_cte, column, where),
        [*params, *key_params, epoch_hour(query.start), query.step_hours, *where_params],
        window_scan=True,
    )


def rollup_step_rows(query: AllocationQuery, segments: Sequence[PriceSegment]) -> list[tuple[Any, ...]]:
    """Per (group, step) figures for charts, summed, priced and named by the database in floating point.

    Rows are ``(name, bucket, *StepFigures fields)`` so the caller builds each figure in one call: at
    30 days × hourly × 100 namespaces this is 72,000 rows and Python time per row is what counts.
    """
    found = _filter(query)
    if found is None:
        return []
    where, where_params = found
    cte, params = sql.price_segments_sql(segments, money="DOUBLE PRECISION")
    return sql.fetch_binary(
        sql.rollup_step_figures_sql(cte, query.aggregate, where),
        [*params, epoch_hour(query.start), query.step_hours, *where_params],
    )


def team_cost_totals(query: AllocationQuery, teams: Mapping[int, Team]) -> dict[str, UsageSums]:
    """Exact window totals per namespace or team from the priced per-team rollup."""
    found = sql.team_cost_totals_sql(epoch_hour(query.start), epoch_hour(query.end), query.team_ids)
    if found is None:
        return {}
    totals = {}
    for team_id, gpu, cpu, memory, gpu_cost, cpu_cost, memory_cost, util, measured in sql.fetch_all(*found):
        team = teams.get(team_id)
        name = (team.namespace if query.aggregate == "namespace" else team.slug) if team else str(team_id)
        totals[name] = UsageSums(
            gpu_usage=int(gpu), gpu_cost_units=int(gpu_cost), cpu_milli_us=int(cpu), cpu_cost_units=int(cpu_cost),
            memory_mib_us=int(memory), memory_cost_units=int(memory_cost), util_usage=float(util or 0),
            util_measured_usage=int(measured or 0),
        )  # fmt: skip
    return totals


def team_cost_step_rows(query: AllocationQuery) -> list[tuple[Any, ...]]:
    """Per (team id, step) chart figures from the priced per-team rollup, in ``StepFigures`` field order.

    With a 1-hour step every row already is one figure: the query reads stored floats and computes
    nothing; the caller names the team. Longer steps sum them.
    """
    found = _filter(query, alias="c")
    if found is None:
        return []
    where, where_params = found
    first = epoch_hour(query.start)
    if query.step_hours == 1:
        return sql.fetch_binary(sql.TEAM_COST_HOURS_SQL.format(where=where), [first, *where_params], aggregate=False)
    return sql.fetch_binary(sql.TEAM_COST_STEPS_SQL.format(where=where), [first, query.step_hours, *where_params])


def gpu_allocation(window: Window) -> dict[tuple[int, str, str], int]:
    """Every tenant's metered GPU usage per (epoch hour, model, capacity type) in the window."""
    allocated: dict[tuple[int, str, str], int] = defaultdict(int)
    for hour, model, ctype, usage in sql.fetch_all(
        sql.GPU_ALLOCATION_SQL, [epoch_hour(window[0]), epoch_hour(window[1])]
    ):
        allocated[(hour, model, ctype)] += int(usage)
    return allocated
