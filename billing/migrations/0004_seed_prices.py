"""Seed the price book with public list prices (the same as ``manage.py seed_prices``)."""

from datetime import UTC, datetime

from django.db import migrations


def seed(apps, schema_editor):
    from billing.core.prices import default_prices

    entry = apps.get_model("billing", "PriceBookEntry")
    for price in default_prices(datetime(2024, 1, 1, tzinfo=UTC)):
        entry.objects.get_or_create(
            resource=price.resource,
            gpu_model=price.gpu_model,
            capacity_type=price.capacity_type,
            effective_from=price.effective_from,
            defaults={"usd_per_hour": price.usd_per_hour, "note": "public list price (seed)"},
        )


class Migration(migrations.Migration):
    dependencies = [("billing", "0003_cost_allocation")]

    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
