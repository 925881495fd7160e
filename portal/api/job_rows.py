"""The API's job shape (``JobSerializer``'s fields, in its order) rendered from plain rows.

The job list, a job, and the answers of submit and cancel are the API's hot paths: building model
instances for each job and its nested placements, transitions and attempts, then walking DRF's
field objects for each, cost several times the queries' own time. Here each relation is one
``values()`` query and every value is rendered by the same DRF field class ``JobSerializer`` uses
(so a datetime, a decimal or a float comes out identical). ``JobSerializer`` stays the schema's
description and the reference: ``tests/portal/api/test_job_rows.py`` checks both agree on any job.

Steps of ``jobs_render``: 1. read the rows of each relation for the page's jobs (allowed GPU models,
transitions; live placements and attempts of the jobs ever admitted); 2. compute every job's costs
once (``job_costs``, on the attempts read in 1); 3. render each job, its nested lists and its figures.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import Model, QuerySet
from rest_framework import serializers

from billing.selectors import job_costs
from portal.api.serializers import AttemptSerializer, JobSerializer, PlacementSerializer, TransitionSerializer
from portal.jobs.models import GpuModel, Job, JobAttempt, JobTransition, ReplicaPlacement
from scheduling.engine.shares import billed_gpus

# Fields of the shape that are a column under another name (a related row's).
_RENAMED = {
    "team": "team__slug",
    "namespace": "team__namespace",
    "queue": "local_queue__name",
    "owner": "owner__username",
    "priority_class": "priority_class__name",
    "priority": "priority_class__value",
    "gpu_model": "gpu_model__name",
}
_NESTED = ("allowed_gpu_models", "placements", "transitions", "attempts")
_FIGURES = ("run_s", "gpu_hours", "cost_usd", "estimated_total_usd")
# The job columns the shape reads: every other field of ``JobSerializer`` is a column of its name.
JOB_VALUES = tuple(
    _RENAMED.get(name, name)
    for name in JobSerializer.Meta.fields  # type: ignore[attr-defined]
    if name not in _NESTED and name not in _FIGURES
)


@dataclass(frozen=True, slots=True)
class _CostedJob:
    """What ``job_costs`` reads of a job (``billing.selectors.CostedJob``), from a row: a model
    instance of ~50 fields, most of them defaults, cost more to build than the costs themselves."""

    pk: int
    kind: str
    runtime_s: int
    state: str
    finished_at: datetime | None
    restart_policy: str

    @property
    def runs_until_stopped(self) -> bool:
        return Job.kind_runs_until_stopped(self.kind)


_ATTEMPT_VALUES = (
    "job_id", "number", "queued_at", "admitted_at", "started_at", "ended_at", "outcome", "requeued", "end_reason",
    "gpu_model", "capacity_type", "borrowed", "replicas", "gpu_share_7000ths", "nodes", "placements",
)  # fmt: skip


# DRF fields whose ``to_representation`` answers a value of this exact type as it is: ``str(value)``,
# ``int(value)``, ``float(value)``; a BooleanField's True or False.
_KEPT_AS_IS: dict[type, type] = {
    serializers.CharField: str,
    serializers.IntegerField: int,
    serializers.FloatField: float,
    serializers.BooleanField: bool,
}


def _as_is(field: serializers.Field) -> type | None:
    """The type of value ``field`` renders as it is (``object``: any value), else None."""
    if type(field) is serializers.JSONField and not field.binary:  # type: ignore[attr-defined]
        return object
    if type(field) is serializers.ChoiceField and all(type(key) is str for key in field.choices):  # type: ignore[attr-defined]
        return str  # a choice's key: the string itself (any other string is answered as it is too)
    return _KEPT_AS_IS.get(type(field))


_Renderer = tuple[str, str, Any, "type | None"]


def _renderers(
    serializer: serializers.Serializer, names: Iterable[str], sources: dict[str, str] | None = None
) -> list[_Renderer]:
    """``(name, source, render, kept)`` of the serializer's plain fields named ``names``: the row's key
    (``sources``, default the name), the field's ``to_representation``, and the type of value it
    answers as it is (``_render`` skips the call)."""
    fields, sources = serializer.fields, sources or {}
    return [(name, sources.get(name, name), fields[name].to_representation, _as_is(fields[name])) for name in names]


def _render(row: dict[str, Any], renderers: list[_Renderer]) -> dict[str, Any]:
    """Each field's value rendered by its DRF field, None as None (as ``Serializer.to_representation``
    does); a value the field would answer as it is is taken as it is."""
    out = {}
    for name, source, render, kept in renderers:
        value = row[source]
        out[name] = value if value is None or kept is object or type(value) is kept else render(value)
    return out


def _field_names(serializer_class: type[serializers.ModelSerializer]) -> tuple[str, ...]:
    return tuple(serializer_class.Meta.fields)  # type: ignore[attr-defined]


class _Shapes:
    """The DRF fields of the four serializers, built once (field objects are stateless to render)."""

    def __init__(self) -> None:
        job = JobSerializer()
        self.job_order = _field_names(JobSerializer)
        plain = [name for name in self.job_order if name not in _NESTED and name not in _FIGURES]
        self.job = _renderers(job, plain, _RENAMED)
        self.placement = _renderers(PlacementSerializer(), _field_names(PlacementSerializer))
        self.transition = _renderers(TransitionSerializer(), _field_names(TransitionSerializer))
        attempt_names = [n for n in _field_names(AttemptSerializer) if n not in _FIGURES]
        self.attempt_order = _field_names(AttemptSerializer)
        self.attempt = _renderers(AttemptSerializer(), attempt_names)


_shapes: _Shapes | None = None


def _get_shapes() -> _Shapes:
    global _shapes  # built on first use: the field objects need Django's settings
    if _shapes is None:
        _shapes = _Shapes()
    return _shapes


def _figures(cost) -> dict[str, Any]:
    """``CostFieldsMixin``'s four figures of a job's or an attempt's costs."""
    estimate = cost.estimated_total_usd
    return {
        "run_s": round(cost.run_s, 3),
        "gpu_hours": str(cost.so_far.gpu_hours),
        "cost_usd": str(cost.so_far.total_cost),
        "estimated_total_usd": None if estimate is None else str(estimate),
    }


def job_page_rows(jobs: QuerySet[Job]) -> QuerySet:
    """``jobs`` as the plain rows ``jobs_render`` takes (keeps the queryset's filters and order)."""
    return jobs.values(*JOB_VALUES)


# Stand-ins for the parameters of ``JobRows``' SQL while the ORM compiles it: no team or job id is negative.
_TEAMS, _PK = -7_000_001, -7_000_002


class _JobRowsSql:
    """The SQL of ``job_page_rows(Job.objects.filter(team_id__in=teams, pk=pk).order_by(*ordering))``,
    compiled by the ORM once per process with stand-in parameters, the team ids as one array parameter
    (``team_id = ANY(%s)``: the same text for any number of teams), and the converters ``values()``
    applies to its columns. ``teams``: False for every team (a platform admin's list)."""

    def __init__(self, *, teams: bool, one: bool, ordering: tuple[str, ...]) -> None:
        jobs = Job.objects.all()
        if teams:
            jobs = jobs.filter(team_id__in=[_TEAMS])
        if one:
            jobs = jobs.filter(pk=_PK)
        query = job_page_rows(jobs.order_by(*ordering)).query
        compiler = query.get_compiler(connection=connection)
        sql, params = compiler.as_sql()
        if teams:
            quote = connection.ops.quote_name
            in_teams = f"{quote(Job._meta.db_table)}.{quote('team_id')} IN (%s)"
            if sql.count(in_teams) != 1:
                raise RuntimeError(f"the job rows' SQL changed shape: {sql}")
            sql = sql.replace(in_teams, in_teams.replace(" IN (%s)", " = ANY(%s)"))
        self.sql = sql
        self.params = [{_TEAMS: "teams", _PK: "pk"}[value] for value in params]  # any other: fail loudly
        self.names = [*query.extra_select, *query.values_select, *query.annotation_select]
        self.converters = list(compiler.get_converters([column[0] for column in compiler.select]).items())
        # Every job has a team, a queue and an owner (non-null foreign keys): the page's inner joins
        # drop no row, so the jobs are counted on their own table.
        table = connection.ops.quote_name(Job._meta.db_table)
        where = f" WHERE {connection.ops.quote_name('team_id')} = ANY(%s)" if teams else ""
        self.count_sql = f"SELECT COUNT(*) FROM {table}{where}"

    def rows(self, values: dict[str, Any], *, limit: int | None = None, offset: int = 0) -> list[dict[str, Any]]:
        sql, params = self.sql, [values[name] for name in self.params]
        if limit is not None:
            sql, params = f"{sql} LIMIT %s OFFSET %s", [*params, limit, offset]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
        out = []
        for row in rows:
            found = list(row)
            for i, (convert, expression) in self.converters:
                for one in convert:
                    found[i] = one(found[i], expression, connection)
            out.append(dict(zip(self.names, found, strict=True)))
        return out


_job_rows_sql: dict[tuple[bool, bool, tuple[str, ...]], _JobRowsSql] = {}


class JobRows:
    """The rows of ``job_page_rows`` for the jobs of some teams in an order, without building the
    ORM's query on every request (building and compiling it costs the web more CPU than PostgreSQL
    takes to answer it): its SQL is compiled once per process and shape (``_JobRowsSql``).

    ``team_ids``: the teams whose jobs these are (None: every team's). A sequence for Django's
    ``Paginator`` (``count()`` and slices: one query each); ``one(pk)`` reads one job.
    ``tests/portal/api/test_job_rows.py`` checks the rows, counts and pages equal the ORM's."""

    ordered = True  # for ``Paginator``'s check: the order is ``ordering``

    def __init__(self, *, team_ids: Sequence[int] | None, ordering: Sequence[str]) -> None:
        self.team_ids, self.ordering = team_ids, tuple(ordering)

    @staticmethod
    def available() -> bool:
        """Whether the database has arrays (the embedded demo's SQLite has none: the ORM's path)."""
        return connection.vendor == "postgresql"

    def _sql(self, *, one: bool) -> _JobRowsSql:
        shape = (self.team_ids is not None, one, self.ordering)
        made = _job_rows_sql.get(shape)
        if made is None:
            made = _job_rows_sql[shape] = _JobRowsSql(teams=shape[0], one=one, ordering=self.ordering)
        return made

    def _values(self, pk: int | None = None) -> dict[str, Any]:
        return {"teams": list(self.team_ids or ()), "pk": pk}

    def count(self) -> int:
        sql = self._sql(one=False)
        with connection.cursor() as cursor:
            cursor.execute(sql.count_sql, [] if self.team_ids is None else [list(self.team_ids)])
            return int(cursor.fetchone()[0])

    def __getitem__(self, part: slice) -> list[dict[str, Any]]:
        if not isinstance(part, slice) or part.step is not None:
            raise TypeError("JobRows takes a slice without a step")
        start = part.start or 0
        limit = None if part.stop is None else max(part.stop - start, 0)
        return self._sql(one=False).rows(self._values(), limit=limit, offset=start)

    def one(self, pk: int) -> dict[str, Any] | None:
        found = self._sql(one=True).rows(self._values(pk))
        return found[0] if found else None


@dataclass(frozen=True, slots=True)
class Relations:
    """The rows of each relation of some jobs, by job id (step 1 of ``jobs_render``)."""

    allowed: dict[int, list[str]]  # GPU model names, in the name order the prefetch reads them
    placements: dict[int, list[dict]]  # live placements, by replica
    transitions: dict[int, list[dict]]  # by time
    attempt_rows: list[JobAttempt]  # instances: ``job_costs`` reads them too


def relations_read(ids: Sequence[int], admitted_ids: Sequence[int] | None = None) -> Relations:
    """The relations of the jobs ``ids``, one query each (ordered as the models' Meta.ordering orders
    the prefetches). ``admitted_ids``: those of ``ids`` ever admitted (a job's ``attempt`` counter
    above 0; default: all). The others have no attempt and no placement: both are written at an
    admission, which also counts the attempt (``portal.jobs.transitions``; the audit checks that the
    counter equals the admissions), so a page of jobs that were never admitted (a queue's backlog)
    reads neither."""
    admitted_ids = ids if admitted_ids is None else admitted_ids
    placements: dict[int, list[dict]] = defaultdict(list)
    attempt_rows: list[JobAttempt] = []
    if admitted_ids:
        for placement in _ROWS[ReplicaPlacement].read(admitted_ids):
            placements[placement["job_id"]].append(placement)
        attempt_rows = list(JobAttempt.objects.filter(job_id__in=admitted_ids).order_by("job_id", "number"))
    transitions: dict[int, list[dict]] = defaultdict(list)
    for transition in _ROWS[JobTransition].read(ids):
        transitions[transition["job_id"]].append(transition)
    return Relations(_allowed_read(ids), placements, transitions, attempt_rows)


class _RowsOf:
    """A relation's rows for some jobs, as ``Model.objects.filter(job_id__in=ids).order_by(...)
    .values()`` gives them (every concrete field by attname, each through the field's own database
    converters: a JSON column decoded as ``JSONField`` decodes it), from SQL written once.

    Building and compiling the ORM's query costs more CPU than PostgreSQL takes to answer it, on
    paths every page and API read of a job takes; the SQL here is fixed (``job_id = ANY(%s)``, one
    array parameter), so it is made once per process. ``tests/portal/api/test_job_rows.py`` checks
    the rows equal the ORM's."""

    def __init__(self, model: type[Model], order_by: tuple[str, ...]) -> None:
        self.model, self.order_by = model, order_by
        self.fields = model._meta.concrete_fields
        column = {f.name: str(f.column) for f in self.fields}
        quote = connection.ops.quote_name
        columns = ", ".join(quote(column[f.name]) for f in self.fields)
        table = quote(model._meta.db_table)
        order = ", ".join(quote(column[name]) for name in order_by)
        self.sql = f"SELECT {columns} FROM {table} WHERE job_id = ANY(%s) ORDER BY {order}"

    def read(self, ids: Sequence[int]) -> list[dict[str, Any]]:
        if connection.vendor != "postgresql":  # the embedded demo's SQLite has no arrays
            return list(self.model._default_manager.filter(job_id__in=ids).order_by(*self.order_by).values())
        converters = [(i, f.get_db_converters(connection)) for i, f in enumerate(self.fields)]
        converters = [(i, found) for i, found in converters if found]
        names = [f.attname for f in self.fields]
        with connection.cursor() as cursor:
            cursor.execute(self.sql, [list(ids)])
            rows = cursor.fetchall()
        out = []
        for row in rows:
            values = list(row)
            for i, found in converters:
                for convert in found:
                    values[i] = convert(values[i], None, connection)
            out.append(dict(zip(names, values, strict=True)))
        return out


class _Rows(dict):
    """``_RowsOf`` per model, made on first use (the SQL needs the database connection's quoting)."""

    def __missing__(self, model: type[Model]) -> _RowsOf:
        order = {ReplicaPlacement: ("job", "replica"), JobTransition: ("at", "id")}[model]
        self[model] = made = _RowsOf(model, order)
        return made


_ROWS = _Rows()


def _allowed_read(ids: Sequence[int]) -> dict[int, list[str]]:
    allowed: dict[int, list[str]] = defaultdict(list)
    if connection.vendor != "postgresql":  # the embedded demo's SQLite has no arrays
        through = Job.allowed_gpu_models.through.objects.filter(job_id__in=ids)
        for job_id, name in through.order_by("gpumodel__name").values_list("job_id", "gpumodel__name"):
            allowed[job_id].append(name)
        return allowed
    with connection.cursor() as cursor:
        cursor.execute(_ALLOWED_SQL, [list(ids)])
        for job_id, name in cursor.fetchall():
            allowed[job_id].append(name)
    return allowed


# A job's allowed GPU models by name (per job the names are distinct, so the order within a job is
# the ORM's ``order_by("gpumodel__name")``).
_ALLOWED_SQL = (
    f"SELECT t.job_id, g.name FROM {Job.allowed_gpu_models.through._meta.db_table} t "
    f"JOIN {GpuModel._meta.db_table} g ON g.id = t.gpumodel_id WHERE t.job_id = ANY(%s) ORDER BY g.name"
)


def submitted_rows(
    job: Job, transition: JobTransition, allowed_gpu_models: Sequence[str]
) -> tuple[list[dict[str, Any]], Relations]:
    """The row and relations of a job ``job_submit`` has just created (``transition``: its first;
    ``allowed_gpu_models``: the names it set), as ``job_page_rows`` and ``relations_read`` would read
    them back, without reading: it has no placement and no attempt yet. Its allowed GPU models are
    read only when there are several (their order is the database's collation)."""
    row = {name: _path_value(job, name) for name in JOB_VALUES}
    if len(allowed_gpu_models) <= 1:
        allowed = {job.pk: list(allowed_gpu_models)}
    else:
        allowed = _allowed_read([job.pk])
    values = {f.attname: getattr(transition, f.attname) for f in JobTransition._meta.concrete_fields}
    return [row], Relations(allowed, {}, {job.pk: [values]}, [])


def _path_value(instance: Any, path: str) -> Any:
    """The value a ``values()`` path (``team__slug``) reads, from loaded instances (None across a null
    relation)."""
    value = instance
    for name in path.split("__"):
        if value is None:
            return None
        value = getattr(value, name)
    return value


def jobs_render(
    rows: Sequence[dict[str, Any]], *, now: datetime, speedup: float, relations: Relations | None = None
) -> list[dict[str, Any]]:
    """The API shape of each job row (from ``job_page_rows``), in the rows' order; ``relations``: the
    rows' relations when the caller has them (else read)."""
    shapes = _get_shapes()
    # 1. The relations, one query each.
    if relations is None:
        relations = relations_read([row["id"] for row in rows], [row["id"] for row in rows if row["attempt"]])
    allowed, placements, transitions = relations.allowed, relations.placements, relations.transitions
    attempts: dict[int, list[dict]] = defaultdict(list)
    for instance in relations.attempt_rows:
        attempts[instance.job_id].append({name: getattr(instance, name) for name in _ATTEMPT_VALUES})
    # 2. Costs, from the fields of each row ``job_costs`` reads.
    cost_jobs = [
        _CostedJob(row["id"], row["kind"], row["runtime_s"], row["state"], row["finished_at"], row["restart_policy"])
        for row in rows
    ]
    costs = job_costs(jobs=cost_jobs, now=now, speedup=speedup, attempts_read=relations.attempt_rows)
    # 3. Render.
    out = []
    for row in rows:
        job_id = row["id"]
        cost = costs[job_id]
        values = _render(row, shapes.job)
        values["allowed_gpu_models"] = allowed.get(job_id, [])
        values["placements"] = [_render(p, shapes.placement) for p in placements.get(job_id, ())]
        values["transitions"] = [_render(t, shapes.transition) for t in transitions.get(job_id, ())]
        values.update(_figures(cost))
        rendered_attempts = []
        for attempt in attempts.get(job_id, ()):
            attempt["gpus"] = billed_gpus(attempt["gpu_share_7000ths"])
            one = _render(attempt, shapes.attempt)
            one.update(_figures(cost.attempts[attempt["number"]]))
            rendered_attempts.append({name: one[name] for name in shapes.attempt_order})
        values["attempts"] = rendered_attempts
        out.append({name: values[name] for name in shapes.job_order})
    return out
