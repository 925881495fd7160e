"""How the adapters tell whether rows changed since they last read them (PostgreSQL; elsewhere they
cannot, and read again).

- ``rows_version``: a token over whole tables, for small ones (configuration, nodes).
- ``ReadMark``: which transactions a read saw, to find the jobs whose change stamp (``change_xid``,
  set by triggers: migration ``jobs 0013``) it did not see (``changed_since``).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection
from django.db.models import Model


def rows_version(*models: type[Model]) -> str | None:
    """A token that changes whenever a row of ``models``' tables is inserted, updated or deleted, read
    in one query: PostgreSQL's location (``ctid``) and creating transaction (``xmin``) of every row
    version, hashed. An update writes a new row version at a new location, also within the
    transaction that inserted the row, and committed versions keep their ``xmin``. ``None`` on another
    database (the SQLite demo): then nothing may be kept on it."""
    if connection.vendor != "postgresql":
        return None
    quote = connection.ops.quote_name
    parts = [
        f"(SELECT coalesce(md5(string_agg(ctid::text || ':' || xmin::text, ',' ORDER BY ctid)), '') "
        f"FROM {quote(model._meta.db_table)})"
        for model in models
    ]
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT concat_ws('|', {', '.join(parts)})")
        return str(cursor.fetchone()[0])


@dataclass(frozen=True, slots=True)
class ReadMark:
    """The transactions a read's snapshot saw: every one below ``xmax`` except those in ``running``
    (in progress then; ``xmin`` is the oldest of them, or ``xmax``). Transaction ids are 64-bit
    (``pg_current_xact_id``): they never wrap around. ``server`` names the database and the server's
    start, so a mark is never compared with another database's or a restored server's ids."""

    server: tuple[object, ...]
    xmin: int
    xmax: int
    running: tuple[int, ...]

    def unseen(self, column: str) -> tuple[str, list[object]]:
        """A SQL condition (and its parameters) on a stamp ``column``: stamped by a transaction this
        read did not see. The first term lets an index on the column find the few."""
        return f"({column} >= %s AND ({column} >= %s OR {column} = ANY(%s)))", [
            self.xmin,
            self.xmax,
            list(self.running),
        ]


def read_mark() -> ReadMark:
    """The current transaction's snapshot as a ``ReadMark``: the caller reads in a REPEATABLE READ
    transaction (one snapshot for all its statements) and takes the mark first. PostgreSQL only."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_snapshot_xmin(s)::text::bigint, pg_snapshot_xmax(s)::text::bigint, "
            "ARRAY(SELECT pg_snapshot_xip(s)::text::bigint), "
            "(SELECT oid FROM pg_database WHERE datname = current_database()), pg_postmaster_start_time() "
            "FROM pg_current_snapshot() AS s"
        )
        xmin, xmax, running, database, started = cursor.fetchone()
    return ReadMark(server=(database, started), xmin=int(xmin), xmax=int(xmax), running=tuple(sorted(running)))
