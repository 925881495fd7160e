"""Reads about API tokens."""

from __future__ import annotations

import hashlib

from django.db.models import QuerySet
from django.utils import timezone

from portal.tokens.models import ApiToken


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def api_token_for_key(*, key: str) -> ApiToken | None:
    """The active token of an active user whose key this is; None for unknown, expired or revoked keys."""
    if not key or len(key) > 200:
        return None
    # The one token of this hash (the column is unique), judged by the token's own rule (``state``):
    # a plain lookup by a unique column costs the ORM a fraction of a filtered one, on every request.
    rows = ApiToken.objects.select_related("user").filter(key_hash=key_hash(key)).order_by()
    token = next(iter(rows[:1]), None)
    if token is None or not token.user.is_active or token.state(timezone.now()) != "active":
        return None
    return token


def api_token_list(*, user) -> QuerySet[ApiToken]:
    return ApiToken.objects.filter(user=user).order_by("-created_at", "-id")
