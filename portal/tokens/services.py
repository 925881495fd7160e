"""Writes about API tokens: create (the key is returned once), revoke, record use."""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta

from django.utils import timezone

from portal.jobs.errors import ServiceError
from portal.tokens.models import ApiToken
from portal.tokens.selectors import key_hash

KEY_PREFIX = "gpt_"
TOUCH_EVERY = timedelta(seconds=60)


def api_token_create(*, user, name: str, expires_at: datetime | None = None) -> tuple[ApiToken, str]:
    """A new token and its key. Only the key's hash is stored: the caller shows the key once."""
    name = (name or "").strip()
    if not name:
        raise ServiceError("a token needs a name", field="name")
    if len(name) > 100:
        raise ServiceError("at most 100 characters", field="name")
    if expires_at is not None and expires_at <= timezone.now():
        raise ServiceError("must be in the future", field="expires_at")
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user, name=name, prefix=key[: len(KEY_PREFIX) + 6], key_hash=key_hash(key), expires_at=expires_at
    )
    return token, key


def api_token_revoke(*, token: ApiToken, by) -> ApiToken:
    """Revoke a token (its owner or a platform admin). Revoking twice keeps the first time."""
    if token.user_id != by.pk and not by.is_staff:
        raise ServiceError("only the token's owner can revoke it", status_code=403)
    ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    token.refresh_from_db(fields=["revoked_at"])
    return token


def api_token_touch(*, token: ApiToken, now: datetime | None = None) -> None:
    """Record that the token was used, at most once a minute (not a write per API request)."""
    now = now or timezone.now()
    if token.last_used_at is not None and now - token.last_used_at < TOUCH_EVERY:
        return
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    token.last_used_at = now
