"""Billing's SQL in one place: the rollup queries and upserts, the price segments as a table, and the
helpers that run large results.

The cost formula is not written here: every cost expression is built from the ``Meter`` constants of
``billing.core.units`` (``cost_units_sql``, ``hours_sql``, ``cost_usd_sql``), so the SQL paths and the
Python path (``billing.core.usage``) compute the same figures; ``tests/billing/test_sql.py`` checks
that on generated usage.

PostgreSQL is the database that counts (exact money, binary results); SQLite, the single-process demo,
runs the same text through ``portable_sql``.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction

from billing.core.allocation import UNALLOCATED
from billing.core.prices import PriceSegment
from billing.core.units import CPU, GPU, MEMORY, US_PER_HOUR, Meter


@dataclass(frozen=True, slots=True)
class MeterColumns:
    """Where a meter's figures live: its usage column (``UsageHourly``, ``TeamCostHourly``), its price
    column in the price segments ``p``, and its cost and chart columns in ``TeamCostHourly``."""

    meter: Meter
    usage: str
    price: str
    cost_units: str
    hours: str
    cost_usd: str


COLUMNS = (
    MeterColumns(GPU, "gpu_usage", "gpu_usd", "gpu_cost_units", "gpu_hours", "gpu_cost_usd"),
    MeterColumns(CPU, "cpu_milli_us", "cpu_usd", "cpu_cost_units", "cpu_core_hours", "cpu_cost_usd"),
    MeterColumns(MEMORY, "memory_mib_us", "memory_usd", "memory_cost_units", "ram_gib_hours", "ram_cost_usd"),
)


def double(number: int) -> str:
    """A constant as a floating-point SQL literal (a bare ``1.0`` is NUMERIC in PostgreSQL)."""
    return f"CAST({number} AS DOUBLE PRECISION)"


def cost_units_sql(c: MeterColumns, alias: str = "r") -> str:
    """The cost formula's numerator per row: usage × the price in force (``Meter.cost_units``)."""
    return f"{alias}.{c.usage} * COALESCE(p.{c.price}, 0)"


def hours_sql(c: MeterColumns) -> str:
    """Summed usage in priced hours, as a float (``Meter.hours_float``)."""
    return f"CAST(SUM(r.{c.usage}) AS DOUBLE PRECISION) / {double(c.meter.usage_per_hour)}"


def cost_usd_sql(c: MeterColumns) -> str:
    """Summed cost in USD, as a float, with prices in USD (``Meter.cost_float``: the price scale is
    already divided out of a USD price)."""
    return f"SUM({cost_units_sql(c)}) / {double(c.meter.usage_per_hour)}"


# --- running queries ------------------------------------------------------------------------------------


def portable_sql(sql: str) -> str:
    """SQLite (the demo) stops on integer overflow in SUM; its TOTAL sums in floating point instead.
    Exact money needs PostgreSQL, whose SUM of integers never overflows."""
    return sql if connection.vendor == "postgresql" else sql.replace("SUM(", "TOTAL(")


def fetch_all(sql: str, params: Sequence[Any], *, window_scan: bool = False) -> list[tuple[Any, ...]]:
    """Rows of ``sql``; ``window_scan`` for a window of a rollup written hour after hour (``window_scans``)."""
    with window_scans() if window_scan else contextlib.nullcontext(), connection.cursor() as cursor:
        cursor.execute(portable_sql(sql), params)
        return cursor.fetchall()


@contextlib.contextmanager
def window_scans() -> Iterator[None]:
    """Let PostgreSQL read a window of ``UsageGroupHourly`` by its (epoch_hour, …) index. The rollup is
    written hour after hour, so a window's rows sit together on disk and an index range scan reads only
    their pages; with the default random_page_cost (4, for spinning disks) the planner instead reads the
    whole table (1.4 GB for a year of 10^6 records) once a window passes a few percent of it: 30 days
    took 420-520 ms that way and 180-200 ms by the index (EXPLAIN ANALYZE, bench_cost_pages' data)."""
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL random_page_cost = 1.1")
        yield


def execute(sql: str, params: Sequence[Any]) -> None:
    with connection.cursor() as cursor:
        cursor.execute(portable_sql(sql), params)


def execute_many(sql: str, params: list[tuple[Any, ...]], rows_per_statement: int = 1000) -> None:
    """An ``INSERT … VALUES (%s, …) [ON CONFLICT …]`` for many rows, ``rows_per_statement`` rows a
    statement (one round trip each; row by row, a backfill of 10^6 rows took most of an hour). The
    rows of one call must have distinct keys (an upsert cannot touch a row twice in one statement)."""
    head, rest = sql.split("VALUES ", 1)
    row, tail = rest.split(")", 1)
    with connection.cursor() as cursor:
        for start in range(0, len(params), rows_per_statement):
            chunk = params[start : start + rows_per_statement]
            values = ", ".join([row + ")"] * len(chunk))
            cursor.execute(f"{head}VALUES {values}{tail}", [value for p in chunk for value in p])


@contextlib.contextmanager
def large_aggregate() -> Iterator[None]:
    """Give PostgreSQL room to hash ~10^5 groups in memory (the default 4 MB spills them to disk), in one
    process: parallel workers each hash a partial result and the merge costs more than it saves here."""
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL work_mem = '128MB'")
                cursor.execute("SET LOCAL max_parallel_workers_per_gather = 0")
        yield


def fetch_binary(
    sql: str, params: Sequence[Any], *, aggregate: bool = True, window_scan: bool = False
) -> list[tuple[Any, ...]]:
    """Rows of a large result; ``aggregate`` when the query hashes many groups (see ``large_aggregate``),
    ``window_scan`` as ``fetch_all``'s."""
    with (
        large_aggregate() if aggregate else contextlib.nullcontext(),
        window_scans() if window_scan else contextlib.nullcontext(),
        connection.cursor() as cursor,
    ):
        if connection.vendor == "postgresql":
            import psycopg

            # Binary results (Django's client-side cursors send text): parsing 800,000 floats from
            # text costs about as much as the aggregation itself.
            with psycopg.Cursor(connection.connection) as raw:
                raw.execute(sql, params, binary=True)
                return raw.fetchall()
        cursor.execute(portable_sql(sql), params)
        return cursor.fetchall()


# --- prices and filters -----------------------------------------------------------------------------------


def price_segments_sql(segments: Sequence[PriceSegment], *, money: str = "NUMERIC") -> tuple[str, list[Any]]:
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
        prices: list[Any] = [s.gpu_usd, s.cpu_usd, s.memory_usd]
        if money != "NUMERIC":
            prices = [float(p) for p in prices]
        params += [s.gpu_model, s.capacity_type, s.hour_from, s.hour_to, *prices]
    sql = "p (gpu_model, capacity_type, h0, h1, gpu_usd, cpu_usd, memory_usd) AS (VALUES " + ", ".join(rows) + ")"
    return sql, params


PRICE_JOIN = """
    LEFT JOIN p ON p.gpu_model = r.gpu_model AND p.capacity_type = r.capacity_type
        AND r.epoch_hour >= p.h0 AND r.epoch_hour < p.h1
"""


def hours_filter(
    hour_from: int, hour_to: int, team_ids: frozenset[int] | None, alias: str = "r"
) -> tuple[str, list[Any]] | None:
    """WHERE clause of a window of epoch hours and the visible teams; None when no team is visible."""
    where = f"{alias}.epoch_hour >= %s AND {alias}.epoch_hour < %s"
    params: list[Any] = [hour_from, hour_to]
    if team_ids is not None:
        if not team_ids:
            return None
        where += f" AND {alias}.team_id IN (" + ", ".join(["%s"] * len(team_ids)) + ")"
        params += sorted(team_ids)
    return where, params


# --- reading the hourly rollup (UsageHourly) ---------------------------------------------------------------

ROLLUP_AGGREGATES = {
    "namespace": ("r.team_id",),
    "team": ("r.team_id",),
    "queue": ("r.team_id", "r.local_queue"),
    "cluster_queue": ("r.cluster_queue",),
    "gpu_model": ("r.gpu_model",),
    "capacity_type": ("r.capacity_type",),
}
"""Aggregates the hourly rollup can answer, and the rollup columns that key their groups."""

ROLLUP_NAMES = {
    "namespace": "t.namespace",
    "team": "t.slug",
    "queue": "t.namespace || '/' || x.local_queue",
    "cluster_queue": "x.cluster_queue",
    "gpu_model": "CASE WHEN x.gpu_model = '' THEN 'cpu-only' ELSE x.gpu_model END",
    "capacity_type": "x.capacity_type",
}
"""A group's name in SQL, from the inner query ``x`` and the team ``t``."""


def rollup_priced_sql(cte: str, cols: Sequence[str], where: str) -> str:
    """Per (``cols``, bucket): usage and exact cost numerators, priced per row in the database.
    Parameters: the segments', the window's first hour, the step in hours, the filter's."""
    select_cols = ", ".join(cols)
    usage_and_cost = ",\n            ".join(f"SUM(r.{c.usage}), SUM({cost_units_sql(c)})" for c in COLUMNS)
    return f"""
        WITH {cte}
        SELECT {select_cols}, (r.epoch_hour - %s) / %s AS bucket,
            {usage_and_cost},
            SUM(r.gpu_util_usage), SUM(r.gpu_util_measured_usage)
        FROM billing_usagehourly r {PRICE_JOIN}
        WHERE {where}
        GROUP BY {select_cols}, bucket
    """


USAGE_HOURLY = "billing_usagehourly r"
GROUP_HOURLY = "billing_usagegrouphourly r CROSS JOIN k"
"""The two usage rollups as a FROM clause; the group rollup's label key (``label:<key>``) is the one row
of ``k`` (``group_key_sql``), so a label's value is a column expression and no parameter sits between
the SELECT list's."""

GROUP_AGGREGATES = {
    "owner": "r.owner_id",
    "label": f"COALESCE(r.labels ->> k.label_key, '{UNALLOCATED}')",
}
"""The group rollup's aggregates (``label`` stands for every ``label:<key>``) and their group column."""


def group_key_sql(label_key: str) -> tuple[str, list[Any]]:
    """``k``: the label key the group rollup is aggregated by (empty for ``owner``), after ``p``."""
    return ", k (label_key) AS (VALUES (CAST(%s AS TEXT)))", [label_key]


def rollup_per_segment_sql(cte: str, group_cols: Sequence[str], where: str, table: str = USAGE_HOURLY) -> str:
    """Per (group, model, capacity type, price segment): usage summed, to be priced in integers."""
    cols = ", ".join(group_cols)
    usage = ", ".join(f"SUM(r.{c.usage})" for c in COLUMNS)
    return f"""
        WITH {cte}
        SELECT {cols}, r.gpu_model, r.capacity_type, p.h0,
            {usage},
            SUM(r.gpu_util_usage), SUM(r.gpu_util_measured_usage)
        FROM {table} {PRICE_JOIN}
        WHERE {where}
        GROUP BY {cols}, r.gpu_model, r.capacity_type, p.h0
    """


def _step_figures_sql(cte: str, names: str, inner_cols: str, group_by: str, where: str, table: str, join: str) -> str:
    """Per (group, step): ``(name, bucket, *StepFigures fields)`` summed and priced (prices in USD as
    floats) in an inner query ``x``, named by ``names``. Parameters: the segments', first hour, step,
    the filter's."""
    short = {GPU: "g", CPU: "c", MEMORY: "r"}
    figures = ",\n                ".join(
        f"{hours_sql(c)} AS {short[c.meter]}h,\n                {cost_usd_sql(c)} AS {short[c.meter]}c" for c in COLUMNS
    )
    return f"""
        WITH {cte}
        SELECT {names}, x.bucket, x.gh, x.gc, x.ch, x.cc, x.rh, x.rc,
            CAST(0 AS DOUBLE PRECISION), x.gc + x.cc + x.rc, CASE WHEN x.um > 0 THEN x.uw / x.um / 100 END
        FROM (
            SELECT {inner_cols}, (r.epoch_hour - %s) / %s AS bucket,
                {figures},
                SUM(r.gpu_util_usage) AS uw, CAST(SUM(r.gpu_util_measured_usage) AS DOUBLE PRECISION) AS um
            FROM {table} {PRICE_JOIN}
            WHERE {where}
            GROUP BY {group_by}, bucket
        ) x {join}
    """


def rollup_step_figures_sql(cte: str, aggregate: str, where: str) -> str:
    """``UsageHourly``'s figures per (group, step), named by the database (``_step_figures_sql``)."""
    group_cols = ROLLUP_AGGREGATES[aggregate]
    cols = ", ".join(group_cols)
    inner_cols = ", ".join(f"{c} AS {c.removeprefix('r.')}" for c in group_cols)
    join_team = "JOIN tenants_team t ON t.id = x.team_id" if "r.team_id" in group_cols else ""
    return _step_figures_sql(cte, ROLLUP_NAMES[aggregate], inner_cols, cols, where, USAGE_HOURLY, join_team)


def group_step_figures_sql(cte: str, group_col: str, where: str) -> str:
    """``UsageGroupHourly``'s figures per (group key, step): the caller names the keys."""
    return _step_figures_sql(cte, "x.g", f"{group_col} AS g", group_col, where, GROUP_HOURLY, "")


GPU_ALLOCATION_SQL = (
    "SELECT epoch_hour, gpu_model, capacity_type, gpu_usage FROM billing_gpuallocationhourly"
    " WHERE epoch_hour >= %s AND epoch_hour < %s"
)

TEAM_EFFICIENCY_SQL = """SELECT r.team_id, SUM(r.gpu_usage), SUM(r.gpu_util_usage), SUM(r.gpu_util_measured_usage)
    FROM billing_usagehourly r WHERE r.epoch_hour >= %s AND r.epoch_hour < %s AND r.team_id IN ({placeholders})
    GROUP BY r.team_id"""


def job_efficiency_sql(team_count: int) -> str:
    """Per job: GPU usage, utilization and framebuffer (weighted by GPU usage, over the measured part),
    least efficient first. Parameters: the team ids, the window's start and end (intervals that overlap
    it), the limit."""
    placeholders = ", ".join(["%s"] * team_count)
    usage = "CAST(u.gpu_usage AS DOUBLE PRECISION)"
    per_job = f"""
        SELECT u.job_id, u.team_id, MAX(u.gpu_model) AS gpu_model, SUM({usage}) AS usage,
            SUM(CASE WHEN u.gpu_util_pct IS NOT NULL THEN u.gpu_util_pct * {usage} END)
                / NULLIF(SUM(CASE WHEN u.gpu_util_pct IS NOT NULL THEN {usage} END), 0) AS util,
            SUM(CASE WHEN u.gpu_fb_used_mib IS NOT NULL THEN u.gpu_fb_used_mib * {usage} END)
                / NULLIF(SUM(CASE WHEN u.gpu_fb_used_mib IS NOT NULL THEN {usage} END), 0) AS fb,
            SUM(CASE WHEN u.gpu_util_pct IS NOT NULL THEN {usage} ELSE 0 END) AS measured
        FROM billing_usagerecord u
        WHERE u.team_id IN ({placeholders}) AND u."end" > %s AND u.start < %s AND u.gpu_share_7000ths > 0
        GROUP BY u.job_id, u.team_id
    """
    return (
        f"SELECT job_id, team_id, gpu_model, usage, util, fb FROM ({per_job}) j"
        " ORDER BY CASE WHEN util IS NULL THEN 1 ELSE 0 END, util, usage DESC, job_id LIMIT %s"
    )


# --- the priced per-team rollup (TeamCostHourly) ---------------------------------------------------------

TEAM_COST_TOTALS_SQL = """SELECT c.team_id, SUM(c.gpu_usage), SUM(c.cpu_milli_us), SUM(c.memory_mib_us),
    SUM(c.gpu_cost_units), SUM(c.cpu_cost_units), SUM(c.memory_cost_units), SUM(c.gpu_util_usage),
    SUM(c.gpu_util_measured_usage)
    FROM billing_teamcosthourly c WHERE {where} GROUP BY c.team_id"""

TEAM_COST_HOURS_SQL = """SELECT c.team_id, c.epoch_hour - %s, c.gpu_hours, c.gpu_cost_usd, c.cpu_core_hours,
    c.cpu_cost_usd, c.ram_gib_hours, c.ram_cost_usd, CAST(0 AS DOUBLE PRECISION), c.total_cost_usd, c.gpu_efficiency
    FROM billing_teamcosthourly c WHERE {where}"""
"""Hourly steps: every row already is one step's figures (stored floats, nothing computed)."""

TEAM_COST_STEPS_SQL = """SELECT c.team_id, (c.epoch_hour - %s) / %s AS bucket, SUM(c.gpu_hours),
    SUM(c.gpu_cost_usd), SUM(c.cpu_core_hours), SUM(c.cpu_cost_usd), SUM(c.ram_gib_hours), SUM(c.ram_cost_usd),
    CAST(0 AS DOUBLE PRECISION), SUM(c.total_cost_usd),
    CASE WHEN SUM(c.gpu_util_measured_usage) > 0
        THEN SUM(c.gpu_util_usage) / CAST(SUM(c.gpu_util_measured_usage) AS DOUBLE PRECISION) / 100 END
    FROM billing_teamcosthourly c WHERE {where} GROUP BY c.team_id, bucket"""


# --- writing the rollups ---------------------------------------------------------------------------------

ROLLUP_UPSERT = """
INSERT INTO billing_usagehourly
    (epoch_hour, team_id, local_queue, cluster_queue, gpu_model, capacity_type,
     gpu_usage, cpu_milli_us, memory_mib_us, gpu_util_usage, gpu_util_measured_usage)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (epoch_hour, team_id, local_queue, cluster_queue, gpu_model, capacity_type) DO UPDATE SET
    gpu_usage = billing_usagehourly.gpu_usage + EXCLUDED.gpu_usage,
    cpu_milli_us = billing_usagehourly.cpu_milli_us + EXCLUDED.cpu_milli_us,
    memory_mib_us = billing_usagehourly.memory_mib_us + EXCLUDED.memory_mib_us,
    gpu_util_usage = billing_usagehourly.gpu_util_usage + EXCLUDED.gpu_util_usage,
    gpu_util_measured_usage = billing_usagehourly.gpu_util_measured_usage + EXCLUDED.gpu_util_measured_usage
"""

GROUP_UPSERT = """
INSERT INTO billing_usagegrouphourly
    (epoch_hour, team_id, owner_id, labels_hash, labels_text, labels, gpu_model, capacity_type,
     gpu_usage, cpu_milli_us, memory_mib_us, gpu_util_usage, gpu_util_measured_usage)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (epoch_hour, team_id, owner_id, labels_hash, gpu_model, capacity_type) DO UPDATE SET
    gpu_usage = billing_usagegrouphourly.gpu_usage + EXCLUDED.gpu_usage,
    cpu_milli_us = billing_usagegrouphourly.cpu_milli_us + EXCLUDED.cpu_milli_us,
    memory_mib_us = billing_usagegrouphourly.memory_mib_us + EXCLUDED.memory_mib_us,
    gpu_util_usage = billing_usagegrouphourly.gpu_util_usage + EXCLUDED.gpu_util_usage,
    gpu_util_measured_usage = billing_usagegrouphourly.gpu_util_measured_usage + EXCLUDED.gpu_util_measured_usage
"""

ALLOCATION_UPSERT = """
INSERT INTO billing_gpuallocationhourly (epoch_hour, gpu_model, capacity_type, gpu_usage) VALUES (%s, %s, %s, %s)
ON CONFLICT (epoch_hour, gpu_model, capacity_type) DO UPDATE SET
    gpu_usage = billing_gpuallocationhourly.gpu_usage + EXCLUDED.gpu_usage
"""

TEAM_COST_UPSERT = """
INSERT INTO billing_teamcosthourly
    (epoch_hour, team_id, gpu_usage, cpu_milli_us, memory_mib_us, gpu_cost_units, cpu_cost_units,
     memory_cost_units, gpu_util_usage, gpu_util_measured_usage)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (epoch_hour, team_id) DO UPDATE SET
    gpu_usage = billing_teamcosthourly.gpu_usage + EXCLUDED.gpu_usage,
    cpu_milli_us = billing_teamcosthourly.cpu_milli_us + EXCLUDED.cpu_milli_us,
    memory_mib_us = billing_teamcosthourly.memory_mib_us + EXCLUDED.memory_mib_us,
    gpu_cost_units = billing_teamcosthourly.gpu_cost_units + EXCLUDED.gpu_cost_units,
    cpu_cost_units = billing_teamcosthourly.cpu_cost_units + EXCLUDED.cpu_cost_units,
    memory_cost_units = billing_teamcosthourly.memory_cost_units + EXCLUDED.memory_cost_units,
    gpu_util_usage = billing_teamcosthourly.gpu_util_usage + EXCLUDED.gpu_util_usage,
    gpu_util_measured_usage = billing_teamcosthourly.gpu_util_measured_usage + EXCLUDED.gpu_util_measured_usage
"""


TEAM_COST_DAILY_UPSERT = (
    TEAM_COST_UPSERT.replace("billing_teamcosthourly", "billing_teamcostdaily")
    .replace("(epoch_hour, team_id", "(epoch_day, team_id")
    .replace("ON CONFLICT (epoch_hour,", "ON CONFLICT (epoch_day,")
)
"""``TEAM_COST_UPSERT`` into ``TeamCostDaily``: the first parameter is the epoch day."""

TEAM_COST_EXACT = (
    "gpu_usage, cpu_milli_us, memory_mib_us, gpu_cost_units, cpu_cost_units, memory_cost_units,"
    " gpu_util_usage, gpu_util_measured_usage"
)

TEAM_COST_DAILY_REBUILD = f"""
INSERT INTO billing_teamcostdaily (epoch_day, team_id, {TEAM_COST_EXACT})
SELECT epoch_hour / 24, team_id, {", ".join(f"SUM({c})" for c in TEAM_COST_EXACT.split(", "))}
FROM billing_teamcosthourly GROUP BY epoch_hour / 24, team_id ORDER BY epoch_hour / 24, team_id
"""
"""``TeamCostDaily`` from ``TeamCostHourly`` (after deleting it)."""


def team_cost_totals_sql(hour_from: int, hour_to: int, team_ids: frozenset[int] | None) -> tuple[str, list[Any]] | None:
    """Per team: ``TeamCostHourly``'s exact sums over ``[hour_from, hour_to)``, whole UTC days read from
    ``TeamCostDaily`` and the hours before the first and after the last from the hourly rows (columns as
    ``TEAM_COST_TOTALS_SQL``); None when no team is visible."""
    day_from, day_to = -(-hour_from // 24), hour_to // 24
    if day_from >= day_to:
        found = hours_filter(hour_from, hour_to, team_ids, "c")
        return None if found is None else (TEAM_COST_TOTALS_SQL.format(where=found[0]), found[1])
    teams, team_params = "", []
    if team_ids is not None:
        if not team_ids:
            return None
        teams = " AND team_id IN (" + ", ".join(["%s"] * len(team_ids)) + ")"
        team_params = sorted(team_ids)
    sums = ", ".join(f"SUM(c.{c})" for c in TEAM_COST_EXACT.split(", "))
    query = f"""SELECT c.team_id, {sums} FROM (
        SELECT team_id, {TEAM_COST_EXACT} FROM billing_teamcosthourly
            WHERE ((epoch_hour >= %s AND epoch_hour < %s) OR (epoch_hour >= %s AND epoch_hour < %s)){teams}
        UNION ALL
        SELECT team_id, {TEAM_COST_EXACT} FROM billing_teamcostdaily WHERE epoch_day >= %s AND epoch_day < %s{teams}
    ) c GROUP BY c.team_id"""
    params = [hour_from, day_from * 24, day_to * 24, hour_to, *team_params, day_from, day_to, *team_params]
    return query, params


def _team_cost_floats() -> str:
    def cost(c: MeterColumns) -> str:
        return f"CAST({c.cost_units} AS DOUBLE PRECISION) / {double(c.meter.cost_denominator)}"

    columns = ",\n    ".join(
        f"{c.hours} = CAST({c.usage} AS DOUBLE PRECISION) / {double(c.meter.usage_per_hour)},\n"
        f"    {c.cost_usd} = {cost(c)}"
        for c in COLUMNS
    )
    total = "\n        + ".join(cost(c) for c in COLUMNS)
    return f"""
UPDATE billing_teamcosthourly SET
    {columns},
    total_cost_usd = {total},
    gpu_efficiency = CASE WHEN gpu_util_measured_usage > 0
        THEN gpu_util_usage / CAST(gpu_util_measured_usage AS DOUBLE PRECISION) / 100 END
WHERE epoch_hour >= %s AND epoch_hour <= %s
"""


TEAM_COST_FLOATS = _team_cost_floats()
"""Chart figures of ``TeamCostHourly`` from its exact columns (the right-hand sides read the row's
values). Parameters: the first and last epoch hour; append ``TEAMS_FILTER`` to limit the teams."""
TEAMS_FILTER = " AND team_id IN ({})"


def team_cost_reprice_sql(cte: str) -> str:
    """Recompute ``TeamCostHourly`` from ``UsageHourly`` with prices in whole 10^-6 USD, so the sums
    are the exact cost numerators (``PriceSegment.in_units``). Rows are written hour after hour, as
    metering adds them: a window's rows then sit in few pages (a hash order spreads a month over
    most of the table)."""
    usage = ", ".join(f"SUM(r.{c.usage})" for c in COLUMNS)
    cost = ", ".join(f"SUM({cost_units_sql(c)})" for c in COLUMNS)
    return f"""
        WITH {cte}
        INSERT INTO billing_teamcosthourly
            (epoch_hour, team_id, gpu_usage, cpu_milli_us, memory_mib_us, gpu_cost_units,
             cpu_cost_units, memory_cost_units, gpu_util_usage, gpu_util_measured_usage)
        SELECT r.epoch_hour, r.team_id, {usage},
            {cost}, SUM(r.gpu_util_usage), SUM(r.gpu_util_measured_usage)
        FROM billing_usagehourly r {PRICE_JOIN}
        GROUP BY r.epoch_hour, r.team_id
        ORDER BY r.epoch_hour, r.team_id
    """


# --- jobs: run time, GPU usage and cost per job, from its attempts (the job list's sort keys) ----------------

JOB_COST_SCALE = math.lcm(*(m.usage_per_hour for m in (GPU, CPU, MEMORY)))
"""One denominator for the three meters: a job's cost numerator ``Σ usage × price units × (JOB_COST_SCALE
/ usage_per_hour)`` over ``JOB_COST_SCALE × COST_SCALE`` is its total in USD, exactly."""


def epoch_us_sql(column: str) -> str:
    """Microseconds since 1970 of a timestamp column (exact in PostgreSQL; SQLite, the demo, in floats)."""
    if connection.vendor == "postgresql":
        return f"(EXTRACT(EPOCH FROM {column}) * 1000000)"
    return f"((julianday({column}) - 2440587.5) * 86400000000.0)"


def _greatest(*terms: str) -> str:
    return f"{'GREATEST' if connection.vendor == 'postgresql' else 'MAX'}({', '.join(terms)})"


def _least(*terms: str) -> str:
    return f"{'LEAST' if connection.vendor == 'postgresql' else 'MIN'}({', '.join(terms)})"


def job_attempt_sums_sql(job_column: str, now_us: int) -> dict[str, tuple[str, list[Any]]]:
    """Correlated subqueries over the attempts of the job whose id is ``job_column``: ``run_us``
    (microseconds its pods ran, open runs up to ``now_us``) and ``gpu_usage`` (1/7000 GPU × µs)."""
    start, end = epoch_us_sql("a.started_at"), f"COALESCE({epoch_us_sql('a.ended_at')}, %s)"
    base = f"FROM jobs_jobattempt a WHERE a.job_id = {job_column} AND a.started_at IS NOT NULL"
    return {
        "run_us": (f"(SELECT COALESCE(SUM({end} - {start}), 0) {base})", [now_us]),
        "gpu_usage": (f"(SELECT COALESCE(SUM(a.gpu_share_7000ths * ({end} - {start})), 0) {base})", [now_us]),
    }


def job_cost_sql(job_column: str, now_us: int, segments: Sequence[PriceSegment]) -> tuple[str, list[Any]]:
    """A correlated subquery: the cost numerator of the job ``job_column`` (see ``JOB_COST_SCALE``),
    each attempt's run priced by the segments it overlaps (``segments`` in USD, hour-aligned, covering
    every run; a price holds from the start of its hour, as in the rollups)."""
    if not segments:
        return "0", []
    values, params = price_segments_sql([s.in_units() for s in segments])
    start, end = epoch_us_sql("a.started_at"), f"COALESCE({epoch_us_sql('a.ended_at')}, %s)"
    overlap = _greatest("0", f"{_least(end, f'p.h1 * {US_PER_HOUR}')} - {_greatest(start, f'p.h0 * {US_PER_HOUR}')}")
    weights = " + ".join(
        f"a.{column} * p.{c.price} * {JOB_COST_SCALE // c.meter.usage_per_hour}"
        for column, c in zip(("gpu_share_7000ths", "cpu_milli", "memory_mib"), COLUMNS, strict=True)
    )
    sql = (
        f"(WITH {values} SELECT COALESCE(SUM(({weights}) * {overlap}), 0) FROM jobs_jobattempt a "
        # A model without segments of its own is priced by the fallback ('' model), as PriceLookup does.
        "JOIN p ON p.capacity_type = a.capacity_type AND p.gpu_model = CASE WHEN EXISTS "
        "(SELECT 1 FROM p own WHERE own.gpu_model = a.gpu_model) THEN a.gpu_model ELSE '' END "
        f"WHERE a.job_id = {job_column} AND a.started_at IS NOT NULL)"
    )
    return sql, [*params, now_us]


def quota_use_sql(segments: Sequence[PriceSegment], team_count: int | None) -> tuple[str, list[Any]]:
    """Per (team slug, borrowed): the GPU usage (1/7000 GPU × µs) of the attempts' runs inside a window
    and its cost numerator (usage × GPU price in USD, each piece at the segment it falls in; a model
    without segments of its own at the fallback's, as ``PriceLookup``). Parameters after the returned
    ones: the window's first and last µs since 1970, its start and stop as times, then ``team_count``
    team ids."""
    values, params = price_segments_sql(segments)
    start, end = epoch_us_sql("a.started_at"), epoch_us_sql("a.ended_at")
    teams = "" if team_count is None else f" AND j.team_id IN ({', '.join(['%s'] * team_count)})"
    piece = _greatest("0", f"{_least('x.r1', f'p.h1 * {US_PER_HOUR}')} - {_greatest('x.r0', f'p.h0 * {US_PER_HOUR}')}")
    sql = f"""
        WITH {values}, w (ws, we) AS (VALUES (CAST(%s AS BIGINT), CAST(%s AS BIGINT))),
        x AS (
            SELECT t.slug AS team, a.borrowed, a.gpu_share_7000ths AS share, a.gpu_model,
                COALESCE(NULLIF(a.capacity_type, ''), 'on-demand') AS ctype,
                {_greatest(start, "w.ws")} AS r0, {_least(f"COALESCE({end}, w.we)", "w.we")} AS r1
            FROM jobs_jobattempt a JOIN jobs_job j ON j.id = a.job_id JOIN tenants_team t ON t.id = j.team_id
                CROSS JOIN w
            WHERE a.started_at IS NOT NULL AND a.started_at < %s AND (a.ended_at IS NULL OR a.ended_at > %s){teams}
        ),
        xp AS (
            SELECT x.team, x.borrowed, x.share, x.ctype, x.r0, x.r1,
                CASE WHEN x.gpu_model IN (SELECT own.gpu_model FROM p own) THEN x.gpu_model ELSE '' END AS model
            FROM x WHERE x.r1 > x.r0
        ),
        u AS (
            SELECT xp.team, xp.borrowed, SUM(xp.share * (xp.r1 - xp.r0)) AS usage FROM xp GROUP BY xp.team, xp.borrowed
        ),
        c AS (
            SELECT x.team, x.borrowed, SUM(x.share * {piece} * p.gpu_usd) AS cost
            FROM xp x JOIN p ON p.capacity_type = x.ctype AND p.gpu_model = x.model
                AND p.h0 * {US_PER_HOUR} < x.r1 AND p.h1 * {US_PER_HOUR} > x.r0
            GROUP BY x.team, x.borrowed
        )
        SELECT u.team, u.borrowed, u.usage, COALESCE(c.cost, 0)
        FROM u LEFT JOIN c ON c.team = u.team AND c.borrowed = u.borrowed
    """
    return sql, params
