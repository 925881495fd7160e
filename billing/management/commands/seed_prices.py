from django.core.management.base import BaseCommand

from billing.services import price_book_seed_defaults


class Command(BaseCommand):
    help = "Insert the default GPU/CPU/memory list prices into the price book (idempotent)."

    def handle(self, *args, **options):
        created = price_book_seed_defaults()
        self.stdout.write(f"{created} price book entries created")
