"""``python manage.py issue_token USERNAME``: create an API token for a user and print its key (once).

Only the key's hash is stored, so every call creates a new token; ``--rotate`` first revokes the
user's other tokens of the same name.
"""

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from portal.tokens.models import ApiToken
from portal.tokens.services import api_token_create


class Command(BaseCommand):
    help = "Create an API token for USERNAME and print its key (for notebooks: Authorization: Token <key>)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", default="issued by manage.py", help="the token's name")
        parser.add_argument("--expires-days", type=int, default=None, help="expire after N days (default: never)")
        parser.add_argument("--rotate", action="store_true", help="revoke the user's other tokens of this name")

    def handle(self, *args, username: str, name: str, expires_days: int | None, rotate: bool, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user named {username!r}")
        if not user.is_active:
            raise CommandError(f"user {username!r} is inactive")
        if expires_days is not None and expires_days < 1:
            raise CommandError("--expires-days must be at least 1")
        if rotate:
            ApiToken.objects.filter(user=user, name=name, revoked_at__isnull=True).update(revoked_at=timezone.now())
        expires_at = timezone.now() + timedelta(days=expires_days) if expires_days else None
        _, key = api_token_create(user=user, name=name, expires_at=expires_at)
        self.stdout.write(key)
