"""Cost allocation: cost per group and step over a window (``/api/v1/cost/allocation``, the cost page,
budgets).

``cost_allocation`` steps:
1. Prices: the price book's entries become piecewise-constant segments per (GPU model, capacity type)
   over the window (``billing.core.prices.price_segments``); a price applies from its hour on only.
2. Usage: ``allocation_path`` chooses one of five paths by the aggregate and the flags:
   a. ``team_cost_path`` (namespace, team): ``TeamCostHourly``, one priced row per team-hour (exact cost
      numerators for the totals, stored floats for the steps), when it is priced with the current book;
   b. ``rollup_path`` (queue, cluster_queue, gpu_model, capacity_type, and a. with a stale price book):
      ``UsageHourly`` joined with the price segments hour by hour in SQL;
   c. ``rollup_shared_idle_path`` (the same aggregates with ``share_idle``): ``UsageHourly`` priced per
      model and capacity type, so idle can be shared by each group's use of each model;
   d. ``group_path`` (owner, label:<key>): ``UsageGroupHourly`` (hour x team x job owner x label set x
      model x capacity type) priced like b.;
   e. ``record_path`` (job, and c. or d. with ``share_idle``): the usage records, cut at hour boundaries
      and priced in Python.
   Running jobs' open intervals are added up to ``now`` on every path.
3. Idle: recorded capacity per model and hour minus all tenants' allocation (``GpuAllocationHourly``),
   clamped at zero (``billing.core.usage.idle_rows``).
4. ``billing.core.allocation`` assembles steps and exact window totals.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from typing import Any

from django.contrib.auth import get_user_model
from django.utils import timezone

from billing import sql
from billing.core.allocation import (
    UNALLOCATED,
    Allocation,
    AllocationQuery,
    Figures,
    IdleRow,
    UsageRow,
    UsageSums,
    allocation_assemble,
    allocation_assemble_fast,
)
from billing.core.prices import Price, PriceLookup, PriceSegment, price_segments
from billing.core.units import epoch_hour, hours_between
from billing.core.usage import MeteredUsage, idle_rows, record_usage_rows
from billing.core.windows import Window, step_windows
from billing.models import UsageRecord
from billing.selectors.capacity import capacity_changes
from billing.selectors.prices import cost_rollup_current, gpu_model_names_used, price_list
from billing.selectors.rollups import (
    gpu_allocation,
    group_aggregate,
    group_label_set_rows,
    group_step_rows,
    group_totals,
    priced_totals,
    rollup_group,
    rollup_rows,
    rollup_step_rows,
    rollup_totals,
    team_cost_step_rows,
    team_cost_totals,
)
from billing.selectors.usage import running_usage
from portal.tenants.models import Team

RECORD_FIELDS = (
    "job_id", "team_id", "namespace", "local_queue", "cluster_queue", "gpu_model", "capacity_type", "start", "end",
    "gpu_share_7000ths", "duration_us", "cpu_milli_us", "memory_mib_us", "gpu_util_pct", "labels",
)  # fmt: skip


CapacityChanges = dict[tuple[str, str], list[tuple[datetime, int]]]


@dataclass(slots=True)
class SharedReads:
    """What several allocations of one request read alike, read once: the price book, whether the priced
    rollup is current, the teams, running jobs' usage up to a time, recorded capacity over a window.
    A page that shows several allocations passes one to each ``cost_allocation``."""

    prices: list[Price] | None = None
    rollup_current: bool | None = None
    teams: dict[int, Team] | None = None
    # (up to, the teams read: None for all) -> running jobs' usage
    running: dict[tuple[datetime, frozenset[int] | None], list[UsageRecord]] = field(default_factory=dict)
    capacity: dict[Window, CapacityChanges] = field(default_factory=dict)

    def price_list(self) -> list[Price]:
        if self.prices is None:
            self.prices = price_list()
        return self.prices

    def cost_rollup_current(self) -> bool:
        if self.rollup_current is None:
            self.rollup_current = cost_rollup_current(self.price_list())
        return self.rollup_current

    def team_map(self) -> dict[int, Team]:
        if self.teams is None:
            self.teams = {t.pk: t for t in Team.objects.only("pk", "slug", "namespace")}
        return self.teams

    def running_usage(self, until: datetime, team_ids: frozenset[int] | None = None) -> list[UsageRecord]:
        """Running jobs' usage up to ``until``: of ``team_ids``' jobs (None: every team's; read once and
        filtered for any set of teams)."""
        if (until, None) in self.running:
            everyone = self.running[(until, None)]
            return everyone if team_ids is None else [r for r in everyone if r.team_id in team_ids]
        if (until, team_ids) not in self.running:
            self.running[(until, team_ids)] = running_usage(now=until, team_ids=team_ids)
        return self.running[(until, team_ids)]

    def capacity_changes(self, window: Window) -> CapacityChanges:
        if window not in self.capacity:
            self.capacity[window] = capacity_changes(window)
        return self.capacity[window]


@dataclass(frozen=True, slots=True)
class Inputs:
    """What every path reads first: the query, the price book over its window, the teams by id, and
    what the request's other allocations read too."""

    query: AllocationQuery
    now: datetime
    prices: list[Price]
    gpu_models: set[str]
    segments: list[PriceSegment]
    teams: dict[int, Team]
    shared: SharedReads
    steps: bool = True
    """False: the caller reads window totals only (``cost_totals``); the fast paths skip their step query."""

    @property
    def show_idle(self) -> bool:
        """``__idle__`` is the cluster's: platform admins only."""
        return self.query.show_idle and self.query.team_ids is None


AllocationPath = Callable[[Inputs], Allocation]


def cost_allocation(
    query: AllocationQuery, *, now: datetime | None = None, shared: SharedReads | None = None
) -> Allocation:
    """Cost per group and step over a window (see the module docstring)."""
    inputs = allocation_inputs(query, now=now or timezone.now(), shared=shared)
    return allocation_path(query, inputs.prices, inputs.shared)(inputs)


def cost_totals(
    query: AllocationQuery, *, now: datetime | None = None, shared: SharedReads | None = None
) -> dict[str, Figures]:
    """``cost_allocation(query).group_totals()`` without the per-step figures: the same exact window
    totals (they never depend on the steps), one query fewer on the rollup paths (the cost page's model
    charts and its breakdowns show window totals only)."""
    inputs = replace(allocation_inputs(query, now=now or timezone.now(), shared=shared), steps=False)
    return allocation_path(query, inputs.prices, inputs.shared)(inputs).group_totals()


def allocation_inputs(query: AllocationQuery, *, now: datetime, shared: SharedReads | None = None) -> Inputs:
    """Step 1: the price book over the window, and the teams."""
    shared = shared or SharedReads()
    prices = shared.price_list()
    hours = epoch_hour(query.start), epoch_hour(query.end)
    gpu_models = gpu_model_names_used(*hours)
    segments = price_segments(prices, gpu_models, *hours)
    return Inputs(query, now, prices, gpu_models, segments, shared.team_map(), shared)


def allocation_path(query: AllocationQuery, prices: list[Price], shared: SharedReads | None = None) -> AllocationPath:
    """The path that answers ``query`` (step 2 of the module docstring)."""
    if query.aggregate not in sql.ROLLUP_AGGREGATES:
        return group_path if group_aggregate(query.aggregate) and not query.share_idle else record_path
    if query.share_idle:
        return rollup_shared_idle_path
    current = shared.cost_rollup_current() if shared is not None else cost_rollup_current(prices)
    if query.aggregate in ("namespace", "team") and current:
        return team_cost_path
    return rollup_path


def team_cost_path(inputs: Inputs) -> Allocation:
    """2a. Namespace or team from ``TeamCostHourly`` (priced with the current book): exact totals from its
    cost numerators, step figures from its stored floats."""
    query = inputs.query
    totals = team_cost_totals(query, inputs.teams)
    running, idle = _running_and_idle(inputs, PriceLookup(inputs.segments))
    names = {t.pk: (t.namespace if query.aggregate == "namespace" else t.slug) for t in inputs.teams.values()}
    return _assemble_fast(inputs, team_cost_step_rows(query), totals, running, idle, group_names=names)


def rollup_path(inputs: Inputs) -> Allocation:
    """2b. ``UsageHourly`` joined with the price segments: totals summed per segment and priced in
    integers, step figures priced and summed by the database in floating point."""
    query = inputs.query
    segments = inputs.segments
    # The segments cover every model with usage in the window (``gpu_model_names_used``), so none is
    # left unpriced.
    totals, _unpriced = rollup_totals(query, segments, inputs.teams)
    running, idle = _running_and_idle(inputs, PriceLookup(segments))
    step_rows = rollup_step_rows(query, segments) if inputs.steps else []
    return _assemble_fast(inputs, step_rows, totals, running, idle)


def group_path(inputs: Inputs) -> Allocation:
    """2d. Per job owner or label value from ``UsageGroupHourly``, priced like ``rollup_path``."""
    query = inputs.query
    names = owner_names() if query.aggregate == "owner" else None
    totals, _unpriced = group_totals(query, inputs.segments, names)
    running, idle = _running_and_idle(inputs, PriceLookup(inputs.segments))
    step_rows = group_step_rows(query, inputs.segments) if inputs.steps else []
    return _assemble_fast(inputs, step_rows, totals, running, idle, group_names=names)


class GroupReads:
    """Window totals by job owner and by any label key from one read of ``UsageGroupHourly`` per (owner,
    label set, model, capacity type, price segment), the label keys of the window too: what the cost
    page's breakdowns show, which read the rollup once per aggregate before (by user, the keys, by label).
    The totals are ``cost_totals``' (``group_path``'s, running jobs' open usage included)."""

    def __init__(self, query: AllocationQuery, *, now: datetime, shared: SharedReads | None = None) -> None:
        whole = replace(query, show_idle=False, step_hours=hours_between(query.start, query.end))
        self.inputs = replace(allocation_inputs(whole, now=now, shared=shared), steps=False)
        self.rows = group_label_set_rows(whole, self.inputs.segments)
        self.label_sets: dict[str, dict[str, Any]] = {text: json.loads(text) for text in {r[1] for r in self.rows}}

    def label_keys(self) -> list[str]:
        """Every label key of the window's usage, sorted: the rollup's, and the running jobs' open usage
        (which ``by_label`` counts too: a labelled job not metered yet left the breakdown empty)."""
        keys = {key for labels in self.label_sets.values() for key in labels}
        for record in _open_usage(self.inputs, self.inputs.query.team_ids):
            keys.update(record.labels or {})
        return sorted(keys)

    def by_owner(self) -> dict[str, Figures]:
        names = owner_names()
        totals, _unpriced = priced_totals(self.rows, 2, self.inputs.segments, lambda k: names.get(k[0], str(k[0])))
        return self._figures("owner", totals, names)

    def by_label(self, key: str) -> dict[str, Figures]:
        sets = self.label_sets
        totals, _unpriced = priced_totals(self.rows, 2, self.inputs.segments, lambda k: label_value(sets[k[1]], key))
        return self._figures(f"label:{key}", totals)

    def _figures(
        self, aggregate: str, totals: dict[str, UsageSums], names: dict[int, str] | None = None
    ) -> dict[str, Figures]:
        inputs = replace(self.inputs, query=replace(self.inputs.query, aggregate=aggregate))
        running, idle = _running_and_idle(inputs, PriceLookup(inputs.segments))
        return _assemble_fast(inputs, [], totals, running, idle, group_names=names).group_totals()


def label_value(labels: Mapping[str, Any], key: str) -> str:
    """A label set's group under ``label:<key>`` (``UNALLOCATED`` without that key)."""
    value = labels.get(key)
    if value is None:
        return UNALLOCATED
    return value if isinstance(value, str) else json.dumps(value)


def owner_names() -> dict[int, str]:
    """Every user's name by id (the ``owner`` aggregate's groups)."""
    users = get_user_model()
    return dict(users.objects.values_list("pk", users.USERNAME_FIELD))


def _assemble_fast(
    inputs: Inputs,
    step_rows: list[tuple[Any, ...]],
    totals: dict[str, UsageSums],
    running: list[UsageRow],
    idle: list[IdleRow],
    group_names: dict[int, str] | None = None,
) -> Allocation:
    """The large-result assembly: figures per step from the database, exact totals."""
    query = inputs.query
    return allocation_assemble_fast(
        step_rows=step_rows,
        group_names=group_names,
        totals=totals,
        extra_rows=running,
        idle_rows=idle,
        windows=step_windows(query.start, query.end, query.step_hours),
        aggregate=query.aggregate,
        step_hours=query.step_hours,
        show_idle=inputs.show_idle,
    )


def rollup_shared_idle_path(inputs: Inputs) -> Allocation:
    """2c. ``UsageHourly`` priced per row in SQL and kept per model and capacity type, so each group's
    share of a model's idle cost can be computed."""
    query = inputs.query
    prices = PriceLookup(inputs.segments)
    rows = [
        UsageRow(rollup_group(key, query.aggregate, inputs.teams), bucket, model, ctype, sums)
        for key, bucket, model, ctype, sums in rollup_rows(query, inputs.segments, by_model=True)
    ]
    return _assemble(inputs, rows, prices)


def record_path(inputs: Inputs) -> Allocation:
    """2e. The usage records themselves, cut at hour boundaries and priced in Python: any aggregate
    (job, label:<key>, and every rollup one), the general path the others must agree with."""
    query = inputs.query
    prices = PriceLookup(inputs.segments)
    records = UsageRecord.objects.filter(start__lt=query.end, end__gt=query.start).only(*RECORD_FIELDS)
    if query.team_ids is not None:
        records = records.filter(team_id__in=query.team_ids)
    rows = record_rows(records.iterator(chunk_size=5000), query, prices, inputs.teams)
    return _assemble(inputs, rows, prices)


def _assemble(inputs: Inputs, rows: list[UsageRow], prices: PriceLookup) -> Allocation:
    """The general assembly (idle shown or shared) of rows and running jobs' usage."""
    query = inputs.query
    running, idle = _running_and_idle(inputs, prices)
    return allocation_assemble(
        rows=rows + running,
        idle_rows=idle,
        windows=step_windows(query.start, query.end, query.step_hours),
        aggregate=query.aggregate,
        step_hours=query.step_hours,
        show_idle=inputs.show_idle,
        share_idle=query.share_idle,
    )


def _open_usage(inputs: Inputs, team_ids: frozenset[int] | None) -> list[UsageRecord]:
    """Running jobs' open usage in the query's window, of ``team_ids`` (None: every team); none when
    running jobs are left out or the window ends before they could count."""
    query = inputs.query
    if not (query.include_running and query.start < inputs.now):
        return []
    return inputs.shared.running_usage(min(inputs.now, query.end), team_ids)


def _running_and_idle(inputs: Inputs, prices: PriceLookup) -> tuple[list[UsageRow], list[IdleRow]]:
    """Running jobs' open usage of the visible teams, as rows; and idle capacity if it is shown or
    shared (measured against every team's usage, running jobs included)."""
    query = inputs.query
    idle_wanted = query.share_idle or inputs.show_idle
    # Idle capacity is measured against every team's usage; without it, only the visible teams'
    # running jobs are read (a team member's request reads a fifth of them on five teams).
    running_all = _open_usage(inputs, None if idle_wanted else query.team_ids)
    running = [r for r in running_all if query.team_ids is None or r.team_id in query.team_ids]
    running_rows = record_rows(running, query, prices, inputs.teams) if running else []
    if not idle_wanted:
        return running_rows, []
    window = (query.start, query.end)
    changes = inputs.shared.capacity_changes(window)
    if not changes:
        return running_rows, []
    hour_from, hour_to = epoch_hour(query.start), epoch_hour(query.end)
    idle = idle_rows(
        capacity=changes,
        allocated=gpu_allocation(window),
        running=running_all,
        window=window,
        hour_from=hour_from,
        hour_to=hour_to,
        step_hours=query.step_hours,
        prices=prices,
    )
    return running_rows, idle


def record_group(record: UsageRecord, *, aggregate: str, teams: Mapping[int, Team]) -> str:
    """A usage record's group under ``aggregate``."""
    if aggregate == "job":
        return str(record.job_id)
    if aggregate == "owner":
        # Running jobs' usage carries its owner's name (``running_usage``): no job read per record.
        owner = getattr(record, "owner_name", None)
        return owner if owner is not None else record.job.owner.get_username()
    if aggregate.startswith("label:"):
        return label_value(record.labels or {}, aggregate.removeprefix("label:"))
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


def record_rows(
    records: Iterable[UsageRecord], query: AllocationQuery, prices: PriceLookup, teams: Mapping[int, Team]
) -> list[UsageRow]:
    """Records cut at hour boundaries inside the window, priced per hour, summed per (group, bucket, model)."""
    metered: Iterable[MeteredUsage] = records
    return record_usage_rows(
        metered,
        group_of=partial(record_group, aggregate=query.aggregate, teams=teams),
        window=(query.start, query.end),
        hour_from=epoch_hour(query.start),
        step_hours=query.step_hours,
        prices=prices,
    )
