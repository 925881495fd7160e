"""The jobs a cycle's snapshot holds (every live one, and every one submitted after the forecast's
``since``), kept in the process between cycles and re-read only where they changed.

1. Every write to a job row, to its placement rows or to its allowed GPU models stamps the job's
   ``change_xid`` with the writing transaction's id (triggers: migration ``jobs 0013``); a write of
   only the cycle's own outputs (pending reason, queue position, estimated starts) does not.
2. A read runs in one REPEATABLE READ transaction and first records which transactions its snapshot
   sees (``changes.ReadMark``).
3. The next read re-reads the jobs stamped by a transaction the last one did not see, and the ids of
   the jobs it should hold, to drop the others (finished, deleted, no longer recent). Jobs neither
   changed nor dropped are the last read's, unchanged.
4. It reads every job instead on any doubt: the first read of a process or after a failed one; a
   stamping trigger missing or disabled at the last read; another database or a restarted server; a
   change to a table the job columns join (teams, local queues, priority classes, GPU models:
   ``changes.rows_version``); a caller inside a transaction of its own (a test, the audit: its own
   uncommitted writes would carry one id the mark cannot tell apart); a database other than
   PostgreSQL. Writes made with triggers switched off for their session (``session_replication_role
   = replica``) are not seen until the next whole read: nothing of the portal writes so.

``tests/scheduling/adapters/test_job_rows.py`` compares kept reads with whole ones, field by field,
after random inserts, transitions, deletes and edits.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from django.db import connection, transaction
from django.db.models import BooleanField, Q, QuerySet
from django.db.models.expressions import RawSQL

from portal.jobs.models import GpuModel, Job, LocalQueue, PriorityClass, ReplicaPlacement
from portal.jobs.states import ACTIVE_STATES, JobState
from portal.tenants.models import Team
from scheduling.adapters.changes import ReadMark, read_mark, rows_version
from scheduling.adapters.workloads import WORKLOAD_COLUMNS, JobSpecPart, jobs_spec_parts, workload_from_row
from scheduling.engine import model as m

LIVE_STATES = (JobState.PENDING, *ACTIVE_STATES)
# The tables ``WORKLOAD_COLUMNS`` join: a change to one of their rows rewrites many workloads at once.
JOINED_TABLES = (Team, LocalQueue, PriorityClass, GpuModel)
# The triggers that stamp jobs (migration ``jobs 0013``): while one of them is missing or disabled, a
# change could go unstamped, so nothing is kept.
STAMP_TRIGGERS = (
    "jobs_job_change_stamp",
    *(
        f"{table}_touch_{name}"
        for table in ("jobs_replicaplacement", "jobs_job_allowed_gpu_models")
        for name in ("insert", "update_new", "update_old", "delete")
    ),
)
_STATE = WORKLOAD_COLUMNS.index("state")
_CREATED = WORKLOAD_COLUMNS.index("created_at")


@dataclass(slots=True)
class KeptJob:
    """One job as a snapshot reads it: as it is (``live``, for a live job) and as a submission the
    forecast expects again (``recent()``, built when first asked)."""

    row: tuple
    allowed_gpu_models: tuple[str, ...]
    spec: JobSpecPart
    live: m.Workload | None
    _recent: m.Workload | None = field(default=None, repr=False)

    @property
    def created_at(self) -> datetime:
        return self.row[_CREATED]

    def recent(self) -> m.Workload:
        """Pending, placed nowhere, never started: what a like submission would be."""
        if self._recent is None:
            row = self.row
            self._recent = workload_from_row(
                (*row[:_STATE], JobState.PENDING, None, None, None, row[-1]),
                allowed_gpu_models=self.allowed_gpu_models,
                spec=self.spec,
                placements=(),
            )
        return self._recent


@dataclass(frozen=True, slots=True)
class JobRead:
    """A read's jobs by id, and each pending job's back-off end (``not_before``) where it has one."""

    jobs: dict[int, KeptJob]
    not_before: dict[int, datetime]
    whole: bool  # every job was read (not only the changes)

    def live(self, *, now: datetime) -> tuple[m.Workload, ...]:
        """The live jobs by id, less the pending ones still in their back-off at ``now``."""
        out = []
        for pk in sorted(self.jobs):
            job = self.jobs[pk]
            until = self.not_before.get(pk)
            if job.live is not None and not (until is not None and until > now):
                out.append(job.live)
        return tuple(out)

    def recent(self, *, since: datetime) -> tuple[m.Workload, ...]:
        """The jobs submitted after ``since`` (any state) by id, as pending submissions."""
        return tuple(self.jobs[pk].recent() for pk in sorted(self.jobs) if self.jobs[pk].created_at > since)


def allowed_models_of(jobs: QuerySet[Job]) -> dict[int, list[str]]:
    """Job id -> the GPU models it allows (sorted), by a join on ``jobs``' filter."""
    allowed: dict[int, list[str]] = defaultdict(list)
    through = Job.allowed_gpu_models.through.objects.filter(job__in=jobs.values("pk"))
    for job_id, name in through.order_by("job_id", "gpumodel__name").values_list("job_id", "gpumodel__name"):
        allowed[job_id].append(name)
    return allowed


def placements_of(jobs: QuerySet[Job] | None) -> dict[int, list[m.ReplicaPlacement]]:
    """Job id -> its replicas' placements (admitted and running jobs of ``jobs``; None: of every
    job), by replica."""
    rows = ReplicaPlacement.objects.filter(job__state__in=ACTIVE_STATES)
    if jobs is not None:
        rows = rows.filter(job__in=jobs.values("pk"))
    placements: dict[int, list[m.ReplicaPlacement]] = defaultdict(list)
    for job_id, *values in rows.order_by("job_id", "replica").values_list(
        "job_id", "node", "gpu_indices", "gpu_milli", "mig_profile", "mig_slot", "cpu_milli", "memory_mib"
    ):
        placements[job_id].append(ReplicaPlacement.engine_placement_of(*values))
    return placements


def jobs_read(jobs: QuerySet[Job], *, every_active: bool = False) -> tuple[dict[int, KeptJob], dict[int, datetime]]:
    """Each of ``jobs`` as a snapshot reads it, by id, and the back-off ends of the pending ones
    (``every_active``: ``jobs`` holds every admitted and running job, whose placements are then read
    without the join).

    Plain rows, not model instances (a cycle reads thousands of jobs), and only the columns the engine
    reads: a tenant's long command and labels never slow a cycle down. The related rows come by a join
    on the same filter, not an IN list of every id (which costs more to send and plan than to run);
    the spec's lists (tolerations, node selector, placement rules) are parsed once per job
    (``jobs_spec_parts``)."""
    rows = list(jobs.order_by("id").values_list(*WORKLOAD_COLUMNS, "not_before"))
    allowed = allowed_models_of(jobs)
    placements = placements_of(None if every_active else jobs)
    specs = jobs_spec_parts([(row[0], row[len(WORKLOAD_COLUMNS) - 1]) for row in rows])
    out: dict[int, KeptJob] = {}
    not_before: dict[int, datetime] = {}
    for *values, until in rows:
        row = tuple(values)
        pk, state = row[0], row[_STATE]
        models = tuple(allowed.get(pk, ()))
        live = None
        if state in LIVE_STATES:
            live = workload_from_row(
                row, allowed_gpu_models=models, spec=specs[pk], placements=tuple(placements.get(pk, ()))
            )
        out[pk] = KeptJob(row, models, specs[pk], live)
        if state == JobState.PENDING and until is not None:
            not_before[pk] = until
    return out, not_before


def members(since: datetime | None) -> QuerySet[Job]:
    """The jobs a snapshot holds: the live ones, and (``since`` given) every one submitted after it."""
    wanted = Q(state__in=LIVE_STATES)
    if since is not None:
        wanted |= Q(created_at__gt=since)
    return Job.objects.filter(wanted)


class KeptJobs:
    """The last read's jobs and mark, for the next read (steps 2-4 of the module docstring); one per
    process serves every cycle there (``cycle_jobs``), a read at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._read: JobRead | None = None
        self._mark: ReadMark | None = None
        self._joined: str | None = None

    def forget(self) -> None:
        with self._lock:
            self._read, self._mark, self._joined = None, None, None

    def read(self, *, since: datetime | None) -> JobRead:
        """The jobs ``members(since)`` holds now, by id, as a read of all of them would find them."""
        if connection.vendor != "postgresql" or connection.in_atomic_block:
            return JobRead(*jobs_read(members(since), every_active=True), whole=True)
        with self._lock:
            try:
                read = self._read_in_one_snapshot(since)
            except BaseException:
                self._read, self._mark, self._joined = None, None, None  # a failed read keeps nothing
                raise
        return read

    def _read_in_one_snapshot(self, since: datetime | None) -> JobRead:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            mark = read_mark()
            joined = rows_version(*JOINED_TABLES)
            last, last_mark = self._read, self._mark
            if last is None or last_mark is None or last_mark.server != mark.server or joined != self._joined:
                read = JobRead(*jobs_read(members(since), every_active=True), whole=True)
            else:
                read = _changes_read(last, last_mark, since)
            armed = _stamps_armed()
        self._read, self._mark, self._joined = read, mark if armed else None, joined
        return read


def _stamps_armed() -> bool:
    """Whether every stamping trigger is there and enabled."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(DISTINCT tgname) FROM pg_trigger WHERE tgname = ANY(%s) AND tgenabled <> 'D'",
            [list(STAMP_TRIGGERS)],
        )
        return int(cursor.fetchone()[0]) == len(STAMP_TRIGGERS)


def _changes_read(last: JobRead, mark: ReadMark, since: datetime | None) -> JobRead:
    """``last`` brought up to date: the jobs changed since ``mark`` read again, the others kept, those
    no longer held dropped (step 3)."""
    condition, params = mark.unseen(f"{connection.ops.quote_name(Job._meta.db_table)}.change_xid")
    held = dict(
        members(since)
        .annotate(unseen=RawSQL(condition, params, output_field=BooleanField()))
        .order_by()
        .values_list("id", "unseen")
    )
    # Held but neither changed nor kept: a job that became recent again (the clock went back).
    stale = sorted(pk for pk, unseen in held.items() if unseen or pk not in last.jobs)
    jobs, not_before = jobs_read(Job.objects.filter(pk__in=stale)) if stale else ({}, {})
    for pk in held.keys() - jobs.keys():
        jobs[pk] = last.jobs[pk]
        if pk in last.not_before:
            not_before[pk] = last.not_before[pk]
    return JobRead(jobs, not_before, whole=False)


cycle_jobs = KeptJobs()
