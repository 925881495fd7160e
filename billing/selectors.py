"""Read-side billing queries: cost allocation, idle capacity, budgets, efficiency, invoices.

``cost_allocation`` steps:
1. Prices: the price book's entries become piecewise-constant segments per (GPU model, capacity type)
   over the window (``billing.pricing.price_segments``); a price applies from its hour on only.
2. Usage, by aggregate:
   a. namespace, team: ``TeamCostHourly``, one priced row per team-hour (exact cost numerators for the
      totals, stored floats for the steps), when it is priced with the current price book;
   b. otherwise queue, cluster_queue, gpu_model, capacity_type (and a. with a stale price book):
      ``UsageHourly`` joined with the price segments hour by hour in SQL;
   c. job, label:<key>: the usage records, cut at hour boundaries and priced in Python.
   Running jobs' open intervals are added up to ``now`` in every case.
3. Idle: recorded capacity per model and hour minus all tenants' allocation (``GpuAllocationHourly``),
   clamped at zero.
4. ``billing.pricing`` assembles steps and exact window totals.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.db import connection, transaction
from django.utils import timezone

from billing import pricing
from billing.models import (
    Budget,
    BudgetAlert,
    CapacitySnapshot,
    CostRollupState,
    PriceBookEntry,
    UsageRecord,
)
from portal.jobs.models import GpuModel, Job, JobTransition
from portal.jobs.states import JobState
from portal.tenants.models import Team

ROLLUP_AGGREGATES = {
    "namespace": ("r.team_id",),
    "team": ("r.team_id",),
    "queue": ("r.team_id", "r.local_queue"),
    "cluster_queue": ("r.cluster_queue",),
    "gpu_model": ("r.gpu_model",),
    "capacity_type": ("r.capacity_type",),
}


def portable_sql(sql: str) -> str:
    """SQLite (the demo) stops on integer overflow in SUM; its TOTAL sums in floating point instead.
    Exact money needs PostgreSQL, whose SUM of integers never overflows."""
    return sql if connection.vendor == "postgresql" else sql.replace("SUM(", "TOTAL(")


def price_list() -> list[pricing.Price]:
    return [
        pricing.Price(e.resource, e.gpu_model, e.capacity_type, e.effective_from, e.usd_per_hour)
        for e in PriceBookEntry.objects.all()
    ]


def cost_rollup_current(prices: list[pricing.Price] | None = None) -> bool:
    """Whether ``TeamCostHourly`` is priced with the price book as it is now (``prices``, if loaded)."""
    state = CostRollupState.objects.first()
    return state is not None and state.price_version == pricing.price_version(
        price_list() if prices is None else prices
    )


def gpu_model_names() -> set[str]:
    models = set(GpuModel.objects.values_list("name", flat=True))
    models |= set(PriceBookEntry.objects.exclude(gpu_model="").values_list("gpu_model", flat=True))
    return models


@dataclass(frozen=True, slots=True)
class AllocationQuery:
    start: datetime
    end: datetime
    step_hours: int
    aggregate: str = "namespace"
    show_idle: bool = True
    share_idle: bool = False
    team_ids: frozenset[int] | None = None  # None: every team (platform admins)
    include_running: bool = True


def price_segments_sql(segments: list[pricing.PriceSegment], *, money: str = "NUMERIC") -> tuple[str, list]:
    """The price segments as a VALUES table ``p``; ``money`` is the SQL type of the prices (NUMERIC for
    exact sums, DOUBLE PRECISION for chart figures)."""
    rows, params = [], []
    for index, s in enumerate(segments):
        if index == 0:
            rows.append(
                "(CAST(%s AS TEXT), CAST(%s AS TEXT), CAST(%s AS INTEGER), CAST(%s AS INTEGER), "
                f"CAST(%s AS {money}), CAST(%s AS {money}), CAST(%s AS {money}))"
            )
        else:
            rows.append("(%s, %s, %s, %s, %s, %s, %s)")
        prices = [s.gpu_usd, s.cpu_usd, s.memory_usd]
        if money != "NUMERIC":
            prices = [float(p) for p in prices]
        params += [s.gpu_model, s.capacity_type, s.hour_from, s.hour_to, *prices]
    sql = "p (gpu_model, capacity_type, h0, h1, gpu_usd, cpu_usd, memory_usd) AS (VALUES " + ", ".join(rows) + ")"
    return sql, params


@contextlib.contextmanager
def _large_aggregate() -> Iterator[None]:
    """Give PostgreSQL room to hash ~10^5 groups in memory (the default 4 MB spills them to disk), in one
    process: parallel workers each hash a partial result and the merge costs more than it saves here."""
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL work_mem = '128MB'")
                cursor.execute("SET LOCAL max_parallel_workers_per_gather = 0")
        yield


def _rollup_rows(
    query: AllocationQuery, segments: list[pricing.PriceSegment], *, by_model: bool
) -> list[tuple[tuple, int, str, str, pricing.UsageSums]]:
    """Rollup sums per (group key, bucket[, model, capacity type]) with exact cost numerators."""
    hour_from, hour_to = pricing.epoch_hour(query.start), pricing.epoch_hour(query.end)
    group_cols = list(ROLLUP_AGGREGATES.get(query.aggregate, ()))
    extra = ["r.gpu_model", "r.capacity_type"] if by_model else []
    cols = group_cols + [c for c in extra if c not in group_cols]
    cte, params = price_segments_sql(segments)
    where = "r.epoch_hour >= %s AND r.epoch_hour < %s"
    where_params: list = [hour_from, hour_to]
    if query.team_ids is not None:
        if not query.team_ids:
            return []
        where += " AND r.team_id IN (" + ", ".join(["%s"] * len(query.team_ids)) + ")"
        where_params += sorted(query.team_ids)
    select_cols = ", ".join(cols)
    sql = f"""
        WITH {cte}
        SELECT {select_cols}, (r.epoch_hour - %s) / %s AS bucket,
            SUM(r.gpu_usage), SUM(r.gpu_usage * COALESCE(p.gpu_usd, 0)),
            SUM(r.cpu_milli_us), SUM(r.cpu_milli_us * COALESCE(p.cpu_usd, 0)),
            SUM(r.memory_mib_us), SUM(r.memory_mib_us * COALESCE(p.memory_usd, 0)),
            SUM(r.gpu_util_usage), SUM(r.gpu_util_measured_usage)
        FROM billing_usagehourly r
        LEFT JOIN p ON p.gpu_model = r.gpu_model AND p.capacity_type = r.capacity_type
            AND r.epoch_hour >= p.h0 AND r.epoch_hour < p.h1
        WHERE {where}
        GROUP BY {select_cols}, bucket
    """
    with connection.cursor() as cursor:
        cursor.execute(portable_sql(sql), [*params, hour_from, query.step_hours, *where_params])
        fetched = cursor.fetchall()
    n = len(cols)
    model_at = cols.index("r.gpu_model") if by_model else None
    type_at = cols.index("r.capacity_type") if by_model else None
    out = []
    units = pricing.decimal_units
    for row in fetched:
        sums = pricing.UsageSums(
            gpu_usage=int(row[n + 1]),
            gpu_cost_units=units(row[n + 2]),
            cpu_milli_us=int(row[n + 3]),
            cpu_cost_units=units(row[n + 4]),
            memory_mib_us=int(row[n + 5]),
            memory_cost_units=units(row[n + 6]),
            util_usage=int(row[n + 7] or 0),
            util_measured_usage=int(row[n + 8] or 0),
        )
        key = tuple(row[: len(group_cols)])
        model = row[model_at] if model_at is not None else ""
        ctype = row[type_at] if type_at is not None else ""
        out.append((key, int(row[n]), model, ctype, sums))
    return out


def _rollup_filter(query: AllocationQuery, alias: str = "r") -> tuple[str, list] | None:
    """WHERE clause of the window and the visible teams; None when no team is visible."""
    where = f"{alias}.epoch_hour >= %s AND {alias}.epoch_hour < %s"
    params: list = [pricing.epoch_hour(query.start), pricing.epoch_hour(query.end)]
    if query.team_ids is not None:
        if not query.team_ids:
            return None
        where += f" AND {alias}.team_id IN (" + ", ".join(["%s"] * len(query.team_ids)) + ")"
        params += sorted(query.team_ids)
    return where, params


PRICE_JOIN = """
    LEFT JOIN p ON p.gpu_model = r.gpu_model AND p.capacity_type = r.capacity_type
        AND r.epoch_hour >= p.h0 AND r.epoch_hour < p.h1
"""


def _rollup_totals(
    query: AllocationQuery, segments: list[pricing.PriceSegment], teams: dict[int, Team]
) -> tuple[dict[str, pricing.UsageSums], set[str]]:
    """Exact window totals per group, and the GPU models found without a price segment.

    Summed per (group, model, capacity type, price segment) in SQL — bigint sums are exact — and
    priced here in integers, so a few hundred rows carry the whole window.
    """
    found = _rollup_filter(query)
    if found is None:
        return {}, set()
    where, where_params = found
    group_cols = list(ROLLUP_AGGREGATES[query.aggregate])
    cols = ", ".join(group_cols)
    cte, params = price_segments_sql(segments)
    sql = f"""
        WITH {cte}
        SELECT {cols}, r.gpu_model, r.capacity_type, p.h0,
            SUM(r.gpu_usage), SUM(r.cpu_milli_us), SUM(r.memory_mib_us),
            SUM(r.gpu_util_usage), SUM(r.gpu_util_measured_usage)
        FROM billing_usagehourly r {PRICE_JOIN}
        WHERE {where}
        GROUP BY {cols}, r.gpu_model, r.capacity_type, p.h0
    """
    with connection.cursor() as cursor:
        cursor.execute(portable_sql(sql), [*params, *where_params])
        fetched = cursor.fetchall()
    price = {(s.gpu_model, s.capacity_type, s.hour_from): s for s in segments}
    units = pricing.decimal_units
    n = len(group_cols)
    totals: dict[str, pricing.UsageSums] = {}
    unpriced: set[str] = set()
    for row in fetched:
        model, ctype, h0 = row[n], row[n + 1], row[n + 2]
        segment = price.get((model, ctype, h0))
        if segment is None:
            unpriced.add(model)
            gpu_usd = cpu_usd = memory_usd = 0
        else:
            gpu_usd, cpu_usd, memory_usd = (units(segment.gpu_usd), units(segment.cpu_usd), units(segment.memory_usd))
        gpu, cpu, memory = int(row[n + 3]), int(row[n + 4]), int(row[n + 5])
        group = _rollup_group(tuple(row[:n]), query.aggregate, teams)
        sums = totals.get(group)
        if sums is None:
            sums = totals[group] = pricing.UsageSums()
        sums.gpu_usage += gpu
        sums.gpu_cost_units += gpu * gpu_usd
        sums.cpu_milli_us += cpu
        sums.cpu_cost_units += cpu * cpu_usd
        sums.memory_mib_us += memory
        sums.memory_cost_units += memory * memory_usd
        sums.util_usage += float(row[n + 6] or 0)
        sums.util_measured_usage += int(row[n + 7] or 0)
    return totals, unpriced


def _f(number: int) -> str:
    """A constant as a floating-point SQL literal (a bare ``1.0`` is NUMERIC in PostgreSQL)."""
    return f"CAST({number} AS DOUBLE PRECISION)"


ROLLUP_NAMES = {
    "namespace": "t.namespace",
    "team": "t.slug",
    "queue": "t.namespace || '/' || x.local_queue",
    "cluster_queue": "x.cluster_queue",
    "gpu_model": "CASE WHEN x.gpu_model = '' THEN 'cpu-only' ELSE x.gpu_model END",
    "capacity_type": "x.capacity_type",
}


def _rollup_step_rows(query: AllocationQuery, segments: list[pricing.PriceSegment]) -> list[tuple]:
    """Per (group, step) figures for charts, summed, priced and named by the database in floating point.

    Rows are ``(name, bucket, *Figures fields)`` so the caller builds each figure in one call: at
    30 days × hourly × 100 namespaces this is 72,000 rows and Python time per row is what counts.
    """
    found = _rollup_filter(query)
    if found is None:
        return []
    where, where_params = found
    group_cols = list(ROLLUP_AGGREGATES[query.aggregate])
    cols = ", ".join(group_cols)
    inner_cols = ", ".join(f"{c} AS {c.removeprefix('r.')}" for c in group_cols)
    cte, params = price_segments_sql(segments, money="DOUBLE PRECISION")
    join_team = "JOIN tenants_team t ON t.id = x.team_id" if "r.team_id" in group_cols else ""
    sql = f"""
        WITH {cte}
        SELECT {ROLLUP_NAMES[query.aggregate]}, x.bucket, x.gh, x.gc, x.ch, x.cc, x.rh, x.rc,
            CAST(0 AS DOUBLE PRECISION), x.gc + x.cc + x.rc, CASE WHEN x.um > 0 THEN x.uw / x.um / 100 END
        FROM (
            SELECT {inner_cols}, (r.epoch_hour - %s) / %s AS bucket,
                CAST(SUM(r.gpu_usage) AS DOUBLE PRECISION) / {_f(pricing.GPU_HOUR)} AS gh,
                SUM(r.gpu_usage * COALESCE(p.gpu_usd, 0)) / {_f(pricing.GPU_HOUR)} AS gc,
                CAST(SUM(r.cpu_milli_us) AS DOUBLE PRECISION) / {_f(pricing.CPU_CORE_HOUR)} AS ch,
                SUM(r.cpu_milli_us * COALESCE(p.cpu_usd, 0)) / {_f(pricing.CPU_CORE_HOUR)} AS cc,
                CAST(SUM(r.memory_mib_us) AS DOUBLE PRECISION) / {_f(pricing.MEMORY_GIB_HOUR)} AS rh,
                SUM(r.memory_mib_us * COALESCE(p.memory_usd, 0)) / {_f(pricing.MEMORY_GIB_HOUR)} AS rc,
                SUM(r.gpu_util_usage) AS uw, CAST(SUM(r.gpu_util_measured_usage) AS DOUBLE PRECISION) AS um
            FROM billing_usagehourly r {PRICE_JOIN}
            WHERE {where}
            GROUP BY {cols}, bucket
        ) x {join_team}
    """
    return _fetch_binary(sql, [*params, pricing.epoch_hour(query.start), query.step_hours, *where_params])


def _team_cost_step_rows(query: AllocationQuery) -> list[tuple]:
    """Per (team id, step) chart figures from the priced per-team rollup, in ``Figures`` field order.

    With a 1-hour step every row already is one figure: the query reads stored floats and computes
    nothing; the caller names the team. Longer steps sum them.
    """
    found = _rollup_filter(query, alias="c")
    if found is None:
        return []
    where, where_params = found
    if query.step_hours == 1:
        sql = f"""SELECT c.team_id, c.epoch_hour - %s, c.gpu_hours, c.gpu_cost_usd, c.cpu_core_hours, c.cpu_cost_usd,
                c.ram_gib_hours, c.ram_cost_usd, CAST(0 AS DOUBLE PRECISION), c.total_cost_usd, c.gpu_efficiency
            FROM billing_teamcosthourly c WHERE {where}"""
        return _fetch_binary(sql, [pricing.epoch_hour(query.start), *where_params], aggregate=False)
    sql = f"""SELECT c.team_id, (c.epoch_hour - %s) / %s AS bucket, SUM(c.gpu_hours), SUM(c.gpu_cost_usd),
            SUM(c.cpu_core_hours), SUM(c.cpu_cost_usd), SUM(c.ram_gib_hours), SUM(c.ram_cost_usd),
            CAST(0 AS DOUBLE PRECISION), SUM(c.total_cost_usd),
            CASE WHEN SUM(c.gpu_util_measured_usage) > 0
                THEN SUM(c.gpu_util_usage) / CAST(SUM(c.gpu_util_measured_usage) AS DOUBLE PRECISION) / 100 END
        FROM billing_teamcosthourly c WHERE {where} GROUP BY c.team_id, bucket"""
    return _fetch_binary(sql, [pricing.epoch_hour(query.start), query.step_hours, *where_params])


def _fetch_binary(sql: str, params: list, *, aggregate: bool = True) -> list[tuple]:
    """Rows of a large result; ``aggregate`` when the query hashes many groups (see ``_large_aggregate``)."""
    with _large_aggregate() if aggregate else contextlib.nullcontext(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            import psycopg

            # Binary results (Django's client-side cursors send text): parsing 800,000 floats from
            # text costs about as much as the aggregation itself.
            with psycopg.Cursor(connection.connection) as raw:
                raw.execute(sql, params, binary=True)
                return raw.fetchall()
        cursor.execute(portable_sql(sql), params)
        return cursor.fetchall()


def _team_cost_totals(query: AllocationQuery, teams: dict[int, Team]) -> dict[str, pricing.UsageSums]:
    """Exact window totals per namespace or team from the priced per-team rollup."""
    found = _rollup_filter(query, alias="c")
    if found is None:
        return {}
    where, params = found
    with connection.cursor() as cursor:
        cursor.execute(
            portable_sql(
                f"""SELECT c.team_id, SUM(c.gpu_usage), SUM(c.cpu_milli_us), SUM(c.memory_mib_us),
                SUM(c.gpu_cost_units), SUM(c.cpu_cost_units), SUM(c.memory_cost_units), SUM(c.gpu_util_usage),
                SUM(c.gpu_util_measured_usage)
            FROM billing_teamcosthourly c WHERE {where} GROUP BY c.team_id"""
            ),
            params,
        )
        rows = cursor.fetchall()
    totals = {}
    for team_id, gpu, cpu, memory, gpu_cost, cpu_cost, memory_cost, util, measured in rows:
        team = teams.get(team_id)
        name = (team.namespace if query.aggregate == "namespace" else team.slug) if team else str(team_id)
        totals[name] = pricing.UsageSums(
            gpu_usage=int(gpu), gpu_cost_units=int(gpu_cost), cpu_milli_us=int(cpu), cpu_cost_units=int(cpu_cost),
            memory_mib_us=int(memory), memory_cost_units=int(memory_cost), util_usage=float(util or 0),
            util_measured_usage=int(measured or 0),
        )  # fmt: skip
    return totals


def _record_group(record: UsageRecord, aggregate: str, teams: dict[int, Team]) -> str:
    if aggregate == "job":
        return str(record.job_id)
    if aggregate.startswith("label:"):
        return str((record.labels or {}).get(aggregate.removeprefix("label:"), pricing.UNALLOCATED))
    team = teams.get(record.team_id)
    if aggregate == "namespace":
        return team.namespace if team else record.namespace
    if aggregate == "team":
        return team.slug if team else str(record.team_id)
    if aggregate == "queue":
        return f"{record.namespace}/{record.local_queue}"
    if aggregate == "cluster_queue":
        return record.cluster_queue
    if aggregate == "gpu_model":
        return record.gpu_model or "cpu-only"
    return record.capacity_type


def _record_rows(
    records: Iterable[UsageRecord], query: AllocationQuery, prices: pricing.PriceLookup, teams: dict[int, Team]
) -> list[pricing.UsageRow]:
    """Records cut at hour boundaries inside the window, priced per hour, summed per (group, bucket, model)."""
    hour_from = pricing.epoch_hour(query.start)
    sums: dict[tuple[str, int, str, str], pricing.UsageSums] = {}
    for record in records:
        start, end = max(record.start, query.start), min(record.end, query.end)
        if start >= end:
            continue
        group = _record_group(record, query.aggregate, teams)
        replicas_cpu = int(record.cpu_milli_us) // max(1, record.duration_us)
        replicas_memory = int(record.memory_mib_us) // max(1, record.duration_us)
        for hour, micros in pricing.hour_pieces(start, end):
            bucket = (hour - hour_from) // query.step_hours
            key = (group, bucket, record.gpu_model, record.capacity_type)
            row = sums.get(key)
            if row is None:
                row = sums[key] = pricing.UsageSums()
            gpu_usd, cpu_usd, memory_usd = prices.at(record.gpu_model, record.capacity_type, hour)
            gpu_usage = record.gpu_share_7000ths * micros
            cpu = replicas_cpu * micros
            memory = replicas_memory * micros
            row.gpu_usage += gpu_usage
            row.gpu_cost_units += gpu_usage * pricing.decimal_units(gpu_usd)
            row.cpu_milli_us += cpu
            row.cpu_cost_units += cpu * pricing.decimal_units(cpu_usd)
            row.memory_mib_us += memory
            row.memory_cost_units += memory * pricing.decimal_units(memory_usd)
            if record.gpu_util_pct is not None and gpu_usage:
                row.util_usage += round(record.gpu_util_pct * gpu_usage)
                row.util_measured_usage += gpu_usage
    return [pricing.UsageRow(g, b, m, c, s) for (g, b, m, c), s in sums.items()]


def running_usage(*, now: datetime, team_ids: Iterable[int] | None = None) -> list[UsageRecord]:
    """Unsaved usage records for the open Running intervals of running jobs, up to ``now``."""
    from billing.services import RunInterval, usage_for_interval

    jobs = Job.objects.filter(state=JobState.RUNNING).select_related(
        "team", "local_queue__cluster_queue", "priority_class", "owner"
    )
    if team_ids is not None:
        jobs = jobs.filter(team_id__in=list(team_ids))
    jobs = {job.pk: job for job in jobs}
    opened: dict[int, JobTransition] = {}
    for transition in JobTransition.objects.filter(job_id__in=jobs.keys(), to_state=JobState.RUNNING).order_by(
        "job_id", "at", "id"
    ):
        opened[transition.job_id] = transition
    records = []
    for job_id, transition in opened.items():
        if transition.at < now:
            interval = RunInterval(job_id, transition.at, now, transition.detail or {})
            records.append(usage_for_interval(jobs[job_id], interval))
    return records


def _idle_rows(
    query: AllocationQuery, prices: pricing.PriceLookup, running: list[UsageRecord]
) -> list[pricing.IdleRow]:
    """Capacity minus every tenant's allocation, per bucket, model and capacity type; clamped hourly."""
    hour_from, hour_to = pricing.epoch_hour(query.start), pricing.epoch_hour(query.end)
    changes: dict[tuple[str, str], list[tuple[datetime, int]]] = defaultdict(list)
    before = CapacitySnapshot.objects.filter(at__lt=query.start).order_by("-at").values_list("at", flat=True).first()
    snapshots = CapacitySnapshot.objects.filter(at__lt=query.end)
    if before is not None:
        snapshots = snapshots.filter(at__gte=before)
    for at, model, ctype, gpus in snapshots.values_list("at", "gpu_model", "capacity_type", "gpu_count"):
        changes[(model, ctype)].append((at, gpus))
    if not changes:
        return []
    allocated: dict[tuple[int, str, str], int] = defaultdict(int)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT epoch_hour, gpu_model, capacity_type, gpu_usage FROM billing_gpuallocationhourly"
            " WHERE epoch_hour >= %s AND epoch_hour < %s",
            [hour_from, hour_to],
        )
        for hour, model, ctype, usage in cursor.fetchall():
            allocated[(hour, model, ctype)] += int(usage)
    for record in running:
        for hour, micros in pricing.hour_pieces(max(record.start, query.start), min(record.end, query.end)):
            allocated[(hour, record.gpu_model, record.capacity_type)] += record.gpu_share_7000ths * micros
    idle: dict[tuple[int, str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for (model, ctype), points in changes.items():
        for hour, capacity in pricing.capacity_usage(points, hour_from, hour_to).items():
            used = allocated.get((hour, model, ctype), 0)
            free = max(0, capacity - used)
            bucket = (hour - hour_from) // query.step_hours
            row = idle[(bucket, model, ctype)]
            row[0] += free
            row[1] += free * pricing.decimal_units(prices.at(model, ctype, hour)[0])
            row[2] += used
    return [pricing.IdleRow(b, m, c, v[0], v[1], v[2]) for (b, m, c), v in idle.items()]


def cost_allocation(query: AllocationQuery, *, now: datetime | None = None) -> pricing.Allocation:
    """Cost per group and step over a window (see the module docstring)."""
    now = now or timezone.now()
    hour_from, hour_to = pricing.epoch_hour(query.start), pricing.epoch_hour(query.end)
    prices_listed = price_list()
    known_models = gpu_model_names()
    segments = pricing.price_segments(prices_listed, known_models, hour_from, hour_to)
    teams = {t.pk: t for t in Team.objects.only("pk", "slug", "namespace")}
    share_idle = query.share_idle
    fast = query.aggregate in ROLLUP_AGGREGATES and not share_idle
    # Namespace and team: the priced per-team rollup, unless the price book changed since it was priced.
    team_costs = fast and query.aggregate in ("namespace", "team") and cost_rollup_current(prices_listed)
    totals: dict[str, pricing.UsageSums] = {}
    if team_costs:
        totals = _team_cost_totals(query, teams)
    elif fast:
        totals, unpriced = _rollup_totals(query, segments, teams)
        if unpriced - {""}:  # models absent from the catalogue: price them by the fallback entries
            segments = pricing.price_segments(prices_listed, known_models | unpriced, hour_from, hour_to)
            totals, _ = _rollup_totals(query, segments, teams)
    prices = pricing.PriceLookup(segments)
    rows: list[pricing.UsageRow] = []
    if query.aggregate in ROLLUP_AGGREGATES and share_idle:
        for key, bucket, model, ctype, sums in _rollup_rows(query, segments, by_model=True):
            rows.append(pricing.UsageRow(_rollup_group(key, query.aggregate, teams), bucket, model, ctype, sums))
    elif not fast:
        records = UsageRecord.objects.filter(start__lt=query.end, end__gt=query.start).only(
            "job_id", "team_id", "namespace", "local_queue", "cluster_queue", "gpu_model", "capacity_type",
            "start", "end", "gpu_share_7000ths", "duration_us", "cpu_milli_us", "memory_mib_us", "gpu_util_pct",
            "labels",
        )  # fmt: skip
        if query.team_ids is not None:
            records = records.filter(team_id__in=query.team_ids)
        rows = _record_rows(records.iterator(chunk_size=5000), query, prices, teams)
    running_all: list[UsageRecord] = []
    running_rows: list[pricing.UsageRow] = []
    if query.include_running and query.start < now:
        running_all = running_usage(now=min(now, query.end))
        running = [r for r in running_all if query.team_ids is None or r.team_id in query.team_ids]
        running_rows = _record_rows(running, query, prices, teams)
    idle_rows: list[pricing.IdleRow] = []
    show_idle = query.show_idle and query.team_ids is None
    if share_idle or show_idle:
        idle_rows = _idle_rows(query, prices, running_all)
    windows = pricing.step_windows(query.start, query.end, query.step_hours)
    if fast:
        return pricing.allocation_assemble_fast(
            step_rows=_team_cost_step_rows(query) if team_costs else _rollup_step_rows(query, segments),
            group_names=(
                {t.pk: (t.namespace if query.aggregate == "namespace" else t.slug) for t in teams.values()}
                if team_costs
                else None
            ),
            totals=totals,
            extra_rows=running_rows,
            idle_rows=idle_rows,
            windows=windows,
            aggregate=query.aggregate,
            step_hours=query.step_hours,
            show_idle=show_idle,
        )
    return pricing.allocation_assemble(
        rows=rows + running_rows,
        idle_rows=idle_rows,
        windows=windows,
        aggregate=query.aggregate,
        step_hours=query.step_hours,
        show_idle=show_idle,
        share_idle=share_idle,
    )


def _rollup_group(key: tuple, aggregate: str, teams: dict[int, Team]) -> str:
    if aggregate in ("namespace", "team", "queue"):
        team = teams.get(key[0])
        name = (team.namespace if aggregate != "team" else team.slug) if team else str(key[0])
        return f"{name}/{key[1]}" if aggregate == "queue" else name
    if aggregate == "gpu_model":
        return key[0] or "cpu-only"
    return key[0]


# --- budgets ---------------------------------------------------------------------------------------------


def month_gpu_spend(*, team_ids: Iterable[int] | None = None, now: datetime) -> dict[int, Decimal]:
    """GPU cost per team id this calendar month (UTC), including running jobs up to ``now``."""
    start = pricing.month_start(now)
    end = start + timedelta(hours=max(1, -(-int((now - start).total_seconds()) // 3600)))
    ids = None if team_ids is None else frozenset(team_ids)
    query = AllocationQuery(
        start=start,
        end=end,
        step_hours=int((end - start).total_seconds()) // 3600,
        aggregate="team",
        show_idle=False,
        team_ids=ids,
    )
    allocation = cost_allocation(query, now=now)
    slugs = dict(Team.objects.values_list("slug", "pk"))
    return {slugs[slug]: figures.gpu_cost for slug, figures in allocation.totals.items() if slug in slugs}


def teams_over_budget(*, now: datetime | None = None) -> tuple[tuple[str, str], ...]:
    """(team slug, why) for teams whose budget hard stop forbids new jobs: this month's GPU spend has
    reached the monthly budget. Called by every scheduling cycle, so it reads only hard-stop teams.
    """
    now = now or timezone.now()
    budgets = list(Budget.objects.filter(hard_stop=True).select_related("team"))
    if not budgets:
        return ()
    spend = month_gpu_spend(team_ids=[b.team_id for b in budgets], now=now)
    blocked = []
    for budget in budgets:
        spent = spend.get(budget.team_id, Decimal(0))
        if spent >= budget.monthly_gpu_usd:
            blocked.append(
                (
                    budget.team.slug,
                    (
                        f"monthly GPU budget reached: ${spent.quantize(Decimal('0.01'))} of "
                        f"${budget.monthly_gpu_usd} spent in {now:%B %Y}"
                    ),
                )
            )
    return tuple(sorted(blocked))


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    team: Team
    budget_usd: Decimal
    spend_usd: Decimal
    hard_stop: bool

    @property
    def used_pct(self) -> float:
        return float(self.spend_usd / self.budget_usd * 100) if self.budget_usd else 0.0

    @property
    def blocked(self) -> bool:
        return self.hard_stop and self.spend_usd >= self.budget_usd


def budget_status_list(*, teams, now: datetime) -> list[BudgetStatus]:
    budgets = list(Budget.objects.filter(team__in=teams).select_related("team"))
    spend = month_gpu_spend(team_ids=[b.team_id for b in budgets], now=now) if budgets else {}
    return [
        BudgetStatus(b.team, b.monthly_gpu_usd, spend.get(b.team_id, Decimal(0)).quantize(Decimal("0.01")), b.hard_stop)
        for b in budgets
    ]


def budget_alert_list(*, teams, now: datetime):
    """This month's budget alerts of the given teams (for the portal's banner and the cost page)."""
    alerts = BudgetAlert.objects.filter(team__in=teams, month=pricing.month_start(now).date())
    return alerts.select_related("team__budget")  # the banner reads the budget's hard stop


# --- efficiency --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobEfficiency:
    job_id: int
    job_name: str
    team: str
    gpu_model: str
    gpu_hours: Decimal
    gpu_util_pct: float | None
    fb_used_mib: float | None
    recommendation: str


def _per_job_sql(team_ids: list[int]) -> str:
    """Per job: GPU usage, utilization-weighted usage and the measured part, summed in the database."""
    placeholders = ", ".join(["%s"] * len(team_ids))
    usage = "CAST(u.gpu_usage AS DOUBLE PRECISION)"
    return f"""
        SELECT u.job_id, u.team_id, MAX(u.gpu_model) AS gpu_model, SUM({usage}) AS usage,
            SUM(CASE WHEN u.gpu_util_pct IS NOT NULL THEN u.gpu_util_pct * {usage} END)
                / NULLIF(SUM(CASE WHEN u.gpu_util_pct IS NOT NULL THEN {usage} END), 0) AS util,
            SUM(CASE WHEN u.gpu_fb_used_mib IS NOT NULL THEN u.gpu_fb_used_mib * {usage} END)
                / NULLIF(SUM(CASE WHEN u.gpu_fb_used_mib IS NOT NULL THEN {usage} END), 0) AS fb,
            SUM(CASE WHEN u.gpu_util_pct IS NOT NULL THEN {usage} ELSE 0 END) AS measured
        FROM billing_usagerecord u
        WHERE u.team_id IN ({placeholders}) AND u."end" > %s AND u.gpu_share_7000ths > 0
        GROUP BY u.job_id, u.team_id
    """


def job_efficiency_list(*, teams, since: datetime, limit: int = 200) -> list[JobEfficiency]:
    """Jobs that used GPUs since ``since``, GPU-hour-weighted utilization ascending (least efficient
    first, unmeasured last), with advice. Aggregated in the database: a month holds ~10^6 records."""
    team_ids = list(Team.objects.filter(pk__in=[t.pk for t in teams]).values_list("pk", flat=True))
    if not team_ids:
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            portable_sql(
                f"SELECT job_id, team_id, gpu_model, usage, util, fb FROM ({_per_job_sql(team_ids)}) j"
                " ORDER BY CASE WHEN util IS NULL THEN 1 ELSE 0 END, util, usage DESC, job_id LIMIT %s"
            ),
            [*team_ids, since, limit],
        )
        rows = cursor.fetchall()
    jobs = Job.objects.in_bulk([row[0] for row in rows])
    slugs = dict(Team.objects.filter(pk__in=team_ids).values_list("pk", "slug"))
    out = []
    for job_id, team_id, model, usage, util, fb in rows:
        job = jobs[job_id]
        out.append(
            JobEfficiency(
                job_id=job_id,
                job_name=job.name,
                team=slugs[team_id],
                gpu_model=model,
                gpu_hours=Decimal(usage / pricing.GPU_HOUR).quantize(Decimal("0.001")),
                gpu_util_pct=round(util, 1) if util is not None else None,
                fb_used_mib=round(fb, 1) if fb is not None else None,
                recommendation=pricing.recommendation(
                    util_pct=util, gpus_per_replica=job.gpu_share_per_replica, mig_profile=job.mig_profile
                ),
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class TeamEfficiency:
    team: str
    gpu_hours: Decimal
    gpu_util_pct: float | None
    recommendation: str


def team_efficiency_list(*, teams, since: datetime) -> list[TeamEfficiency]:
    """Per team: GPU-hour-weighted utilization from the hour of ``since`` on (read from the hourly
    rollup, so a month costs a few thousand rows), with advice."""
    team_ids = list(Team.objects.filter(pk__in=[t.pk for t in teams]).values_list("pk", flat=True))
    if not team_ids:
        return []
    placeholders = ", ".join(["%s"] * len(team_ids))
    with connection.cursor() as cursor:
        cursor.execute(
            portable_sql(
                f"""SELECT r.team_id, SUM(r.gpu_usage), SUM(r.gpu_util_usage), SUM(r.gpu_util_measured_usage)
                FROM billing_usagehourly r WHERE r.epoch_hour >= %s AND r.team_id IN ({placeholders})
                GROUP BY r.team_id"""
            ),
            [pricing.epoch_hour(since), *team_ids],
        )
        rows = cursor.fetchall()
    slugs = dict(Team.objects.filter(pk__in=team_ids).values_list("pk", "slug"))
    out = []
    for team_id, usage, util_usage, measured in rows:
        util = float(util_usage) / int(measured) if measured else None
        out.append(
            TeamEfficiency(
                team=slugs[team_id],
                gpu_hours=pricing.ratio_to_decimal(int(usage), pricing.GPU_HOUR, 3),
                gpu_util_pct=round(util, 1) if util is not None else None,
                recommendation=pricing.team_recommendation(util_pct=util),
            )
        )
    return sorted(out, key=lambda t: t.team)


# --- invoices -------------------------------------------------------------------------------------------


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


def invoice_lines(*, team: Team, month: datetime, now: datetime) -> list[InvoiceLine]:
    """A team's month, one line per GPU model and capacity type (closed and running usage)."""
    start = pricing.month_start(month)
    end = min(pricing.next_month(start), start + timedelta(days=31))
    query = AllocationQuery(
        start=start,
        end=end,
        step_hours=int((end - start).total_seconds()) // 3600,
        aggregate="namespace",
        show_idle=False,
        team_ids=frozenset({team.pk}),
        include_running=start <= now < end,
    )
    hour_from, hour_to = pricing.epoch_hour(start), pricing.epoch_hour(end)
    segments = pricing.price_segments(price_list(), gpu_model_names(), hour_from, hour_to)
    per_line: dict[tuple[str, str], pricing.UsageSums] = defaultdict(pricing.UsageSums)
    for _key, _bucket, model, ctype, sums in _rollup_rows(query, segments, by_model=True):
        per_line[(model, ctype)].add(sums)
    if query.include_running:
        teams = {team.pk: team}
        prices = pricing.PriceLookup(segments)
        for row in _record_rows(running_usage(now=now, team_ids=[team.pk]), query, prices, teams):
            per_line[(row.gpu_model, row.capacity_type)].add(row.sums)
    lines = []
    for (model, ctype), sums in sorted(per_line.items()):
        f = pricing.figures_exact(sums)
        lines.append(
            InvoiceLine(
                model or "CPU only", ctype, f.gpu_hours, f.gpu_cost, f.cpu_core_hours, f.cpu_cost,
                f.ram_gib_hours, f.ram_cost, f.total_cost,
            )
        )  # fmt: skip
    return lines


# --- summaries kept for the lead's dashboard ----------------------------------------------------------


def gpu_hours_by_team_and_day(*, teams=None, days: int = 14, now: datetime) -> dict[str, dict[str, float]]:
    """GPU-hours per team per UTC day (each record counted on the day its interval starts)."""
    since = now - timedelta(days=days)
    records = UsageRecord.objects.filter(start__gte=since)
    if teams is not None:
        records = records.filter(team__in=teams)
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for slug, start, gpu_seconds in records.values_list("team__slug", "start", "gpu_seconds"):
        day = start.date().isoformat()
        out[slug][day] = out[slug].get(day, 0.0) + float(gpu_seconds) / 3600
    return out
