"""Reads about API tokens."""

from __future__ import annotations

import hashlib

from django.db.models import Q, QuerySet
from django.utils import timezone

from portal.tokens.models import ApiToken


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def api_token_for_key(*, key: str) -> ApiToken | None:
    """The active token of an active user whose key this is; None for unknown, expired or revoked keys."""
    if not key or len(key) > 200:
        return None
    return (
        ApiToken.objects.select_related("user")
        .filter(key_hash=key_hash(key), revoked_at__isnull=True, user__is_active=True)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now()))
        .first()
    )


def api_token_list(*, user) -> QuerySet[ApiToken]:
    return ApiToken.objects.filter(user=user).order_by("-created_at", "-id")
