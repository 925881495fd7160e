"""Reads about API tokens."""

from __future__ import annotations

import hashlib

from django.db import connection
from django.db.models import QuerySet
from django.utils import timezone

from portal.tokens.models import ApiToken


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def api_token_for_key(*, key: str) -> ApiToken | None:
    """The active token of an active user whose key this is; None for unknown, expired or revoked keys."""
    if not key or len(key) > 200:
        return None
    # The one token of this hash (the column is unique), judged by the token's own rule (``state``).
    token = _token_with_user(key_hash(key))
    if token is None or not token.user.is_active or token.state(timezone.now()) != "active":
        return None
    return token


def _token_with_user(hashed: str) -> ApiToken | None:
    """``ApiToken.objects.select_related("user").filter(key_hash=hashed).first()`` without building and
    compiling that query on every request (it costs the ORM more CPU than PostgreSQL takes to answer):
    the SQL is made once per process and both instances are made as the ORM makes them (``from_db``)."""
    global _token_sql
    if connection.vendor != "postgresql":
        # The embedded demo's SQLite: its driver gives datetimes as naive values unless the ORM converts
        # them, so it reads through the ORM (the hot path is PostgreSQL's).
        return ApiToken.objects.select_related("user").filter(key_hash=hashed).first()
    user_model = ApiToken._meta.get_field("user").related_model
    token_fields = ApiToken._meta.concrete_fields
    user_fields = user_model._meta.concrete_fields  # type: ignore[union-attr]
    if _token_sql is None:
        quote = connection.ops.quote_name
        tokens, users = quote(ApiToken._meta.db_table), quote(user_model._meta.db_table)  # type: ignore[union-attr]
        columns = [f"{tokens}.{quote(str(f.column))}" for f in token_fields]
        columns += [f"{users}.{quote(str(f.column))}" for f in user_fields]
        _token_sql = (
            f"SELECT {', '.join(columns)} FROM {tokens} INNER JOIN {users} "
            f"ON {users}.{quote('id')} = {tokens}.{quote('user_id')} WHERE {tokens}.{quote('key_hash')} = %s"
        )
    with connection.cursor() as cursor:
        cursor.execute(_token_sql, [hashed])
        row = cursor.fetchone()
    if row is None:
        return None
    split = len(token_fields)
    token = ApiToken.from_db(connection.alias, [f.attname for f in token_fields], row[:split])
    user = user_model.from_db(connection.alias, [f.attname for f in user_fields], row[split:])  # type: ignore[union-attr]
    token.user = user  # type: ignore[assignment]
    return token


_token_sql: str | None = None


def api_token_list(*, user) -> QuerySet[ApiToken]:
    return ApiToken.objects.filter(user=user).order_by("-created_at", "-id")
