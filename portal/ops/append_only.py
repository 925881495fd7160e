"""Append-only tables on PostgreSQL: a migration step whose trigger refuses ``DELETE`` of a row and an
``UPDATE`` that changes what it records (a user or queue reference going to NULL when that object is
deleted is allowed). ``TRUNCATE``, which only the test runner uses, is not a row operation. Other
databases (the SQLite demo) rely on the admin offering neither change nor delete."""

from __future__ import annotations

from django.db import migrations

FUNCTION = """
CREATE OR REPLACE FUNCTION portal_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP;
END;
$$ LANGUAGE plpgsql;
"""


def append_only(table: str, columns: tuple[str, ...]) -> migrations.RunPython:
    """The step for ``table``, whose recorded ``columns`` may never change."""
    old = ", ".join(f"OLD.{c}" for c in columns)
    new = ", ".join(f"NEW.{c}" for c in columns)
    create = f"""
        DROP TRIGGER IF EXISTS {table}_no_delete ON {table};
        CREATE TRIGGER {table}_no_delete BEFORE DELETE ON {table}
            FOR EACH ROW EXECUTE FUNCTION portal_append_only();
        DROP TRIGGER IF EXISTS {table}_no_update ON {table};
        CREATE TRIGGER {table}_no_update BEFORE UPDATE ON {table}
            FOR EACH ROW WHEN (({old}) IS DISTINCT FROM ({new})) EXECUTE FUNCTION portal_append_only();
    """

    def forwards(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(FUNCTION, params=None)
            schema_editor.execute(create, params=None)

    def backwards(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_no_delete ON {table};")
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_no_update ON {table};")

    return migrations.RunPython(forwards, backwards)
