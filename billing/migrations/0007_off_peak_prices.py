"""The off-peak price tier: its capacity type, and its seed prices (70 % of the seed on-demand list
prices, the same as ``billing.core.prices.default_prices``) where the price book has none yet."""

from datetime import UTC, datetime

from django.db import migrations, models


def seed(apps, schema_editor):
    from billing.core.prices import default_prices

    entry = apps.get_model("billing", "PriceBookEntry")
    if entry.objects.filter(capacity_type="off-peak").exists():
        return
    for price in default_prices(datetime(2024, 1, 1, tzinfo=UTC)):
        if price.capacity_type == "off-peak":
            entry.objects.create(
                resource=price.resource,
                gpu_model=price.gpu_model,
                capacity_type=price.capacity_type,
                effective_from=price.effective_from,
                usd_per_hour=price.usd_per_hour,
                note="off-peak list price (seed): 70 % of on-demand",
            )


class Migration(migrations.Migration):
    dependencies = [("billing", "0006_team_cost_rollup")]

    operations = [
        migrations.AlterField(
            model_name="pricebookentry",
            name="capacity_type",
            field=models.CharField(
                choices=[
                    ("on-demand", "On Demand"),
                    ("spot", "Spot"),
                    ("reserved", "Reserved"),
                    ("off-peak", "Off Peak"),
                ],
                default="on-demand",
                max_length=20,
            ),
        ),
        migrations.RunPython(seed, migrations.RunPython.noop),
    ]
