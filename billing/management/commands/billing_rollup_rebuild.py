from django.core.management.base import BaseCommand

from billing.services import group_rollup_rebuild, rollup_rebuild


class Command(BaseCommand):
    help = (
        "Recompute the hourly usage rollups from the usage records (repair after manual edits); with --groups, "
        "only the rollup per job owner and label set (its backfill)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--groups", action="store_true", help="Only UsageGroupHourly (per owner and label set).")

    def handle(self, *args, **options):
        if options["groups"]:
            self.stdout.write(f"{group_rollup_rebuild()} owner and label rollup rows written")
            return
        rows = rollup_rebuild()
        self.stdout.write(f"{rows} hourly rollup rows written")
