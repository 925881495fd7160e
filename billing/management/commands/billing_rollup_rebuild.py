from django.core.management.base import BaseCommand

from billing.services import rollup_rebuild


class Command(BaseCommand):
    help = "Recompute the hourly usage rollup from the usage records (repair after manual edits)."

    def handle(self, *args, **options):
        rows = rollup_rebuild()
        self.stdout.write(f"{rows} hourly rollup rows written")
