"""Change stamps on jobs (PostgreSQL): every write to a job row, to its placement rows or to its allowed
GPU models stamps the job's ``change_xid`` column with the writing transaction's id, so the scheduler
re-reads only the jobs that changed since its last snapshot (``scheduling.adapters.job_rows``).

A write of only the cycle's own outputs (pending reason, queue position, estimated starts), which a
cycle writes for thousands of pending jobs and never reads back, leaves the stamp alone. Any other
column, one added later included, stamps: the row type is compared whole.

The column is the database's, not the model's: Django never writes it, the triggers own it. Other
databases (the SQLite demo) have neither; the scheduler reads every job there.
"""

from django.db import migrations

# The cycle's outputs: written by ``scheduling.adapters.apply.pending_update``, read by no snapshot.
OUTPUTS = ("pending_reason", "queue_position", "estimated_start", "estimated_start_p90")
RELATED = ("jobs_replicaplacement", "jobs_job_allowed_gpu_models")  # their rows name the job as job_id
# (trigger name, event, transition table): an update touches the jobs of its old rows and of its new.
TOUCHES = (("insert", "INSERT", "new"), ("update_new", "UPDATE", "new"), ("update_old", "UPDATE", "old"),
           ("delete", "DELETE", "old"))  # fmt: skip

FORWARDS = f"""
ALTER TABLE jobs_job ADD COLUMN IF NOT EXISTS change_xid bigint NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS jobs_job_change_xid ON jobs_job (change_xid);

CREATE OR REPLACE FUNCTION jobs_job_change_stamp() RETURNS trigger AS $$
DECLARE
    xid bigint := pg_current_xact_id()::text::bigint;
    probe jobs_job;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        probe := NEW;
        {" ".join(f"probe.{c} := OLD.{c};" for c in OUTPUTS)}
        probe.change_xid := OLD.change_xid;
        IF probe IS NOT DISTINCT FROM OLD THEN
            -- Only the outputs changed (or nothing). A related row's write asks for the stamp by
            -- setting this transaction's id (jobs_job_touch_*); any other value is kept as it was.
            IF NEW.change_xid IS DISTINCT FROM xid THEN
                NEW.change_xid := OLD.change_xid;
            END IF;
            RETURN NEW;
        END IF;
    END IF;
    NEW.change_xid := xid;
    RETURN NEW;
END
$$ LANGUAGE plpgsql;

DROP TRIGGER IF EXISTS jobs_job_change_stamp ON jobs_job;
CREATE TRIGGER jobs_job_change_stamp BEFORE INSERT OR UPDATE ON jobs_job
    FOR EACH ROW EXECUTE FUNCTION jobs_job_change_stamp();

-- A related row written, changed or deleted stamps its job, once per job and transaction (a job
-- already stamped by this transaction, as a transition stamps it before writing its placements, is
-- left alone: no second row version, no lock taken).
""" + "".join(
    f"""
CREATE OR REPLACE FUNCTION jobs_job_touch_{side}() RETURNS trigger AS $$
DECLARE
    xid bigint := pg_current_xact_id()::text::bigint;
BEGIN
    UPDATE jobs_job SET change_xid = xid WHERE id IN (SELECT job_id FROM {side}_rows) AND change_xid <> xid;
    RETURN NULL;
END
$$ LANGUAGE plpgsql;
"""
    for side in ("new", "old")
) + "".join(
    f"""
DROP TRIGGER IF EXISTS {t}_touch_{name} ON {t};
CREATE TRIGGER {t}_touch_{name} AFTER {event} ON {t} REFERENCING {side.upper()} TABLE AS {side}_rows
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_job_touch_{side}();
"""
    for t in RELATED
    for name, event, side in TOUCHES
)

BACKWARDS = (
    "".join(
        f"DROP TRIGGER IF EXISTS {t}_{name} ON {t};\n"
        for t in RELATED
        for name in ("touch_insert", "touch_update_new", "touch_update_old", "touch_delete")
    )
    + """
DROP TRIGGER IF EXISTS jobs_job_change_stamp ON jobs_job;
DROP FUNCTION IF EXISTS jobs_job_touch_new();
DROP FUNCTION IF EXISTS jobs_job_touch_old();
DROP FUNCTION IF EXISTS jobs_job_change_stamp();
DROP INDEX IF EXISTS jobs_job_change_xid;
ALTER TABLE jobs_job DROP COLUMN IF EXISTS change_xid;
"""
)


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(FORWARDS, params=None)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(BACKWARDS, params=None)


class Migration(migrations.Migration):
    dependencies = [("jobs", "0012_ray_job_ray")]

    operations = [migrations.RunPython(forwards, backwards)]
