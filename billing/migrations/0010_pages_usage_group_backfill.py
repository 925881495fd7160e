"""Backfill ``UsageGroupHourly`` from the usage records already metered (``manage.py billing_rollup_rebuild
--groups`` does the same at any time)."""

from django.db import migrations


def backfill(apps, schema_editor):
    # Only when there is something to add: the service reads today's models, which a database created
    # from scratch has only once every migration ran (and then it has no records to add yet).
    if not apps.get_model("billing", "UsageRecord").objects.exists():
        return
    from billing.services.rollups import group_rollup_rebuild

    group_rollup_rebuild()


class Migration(migrations.Migration):
    dependencies = [("billing", "0009_pages_usage_group_hourly")]

    operations = [migrations.RunPython(backfill, migrations.RunPython.noop)]
