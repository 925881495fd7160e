"""``portal.tokens.selectors.api_token_for_key``: a key finds its active token and the token's user, as
the ORM reads them; an unknown, revoked or expired key, or an inactive user's, finds nothing."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.utils import timezone

from portal.tokens.models import ApiToken
from portal.tokens.selectors import api_token_for_key
from portal.tokens.services import api_token_create

pytestmark = pytest.mark.django_db


def field_values(instance) -> dict:
    return {f.attname: getattr(instance, f.attname) for f in instance._meta.concrete_fields}


def test_a_key_finds_its_token_and_user_as_the_orm_reads_them(world):
    alice = world.users["alice"]
    token, key = api_token_create(user=alice, name="laptop", expires_at=timezone.now() + timedelta(days=1))
    api_token_create(user=world.users["bob"], name="other")
    found = api_token_for_key(key=key)
    assert found is not None
    expected = ApiToken.objects.select_related("user").get(pk=token.pk)
    assert field_values(found) == field_values(expected)
    assert field_values(found.user) == field_values(expected.user)
    assert found.user.pk == alice.pk
    assert not found._state.adding  # a saved row, as the ORM loads it
    # Raw column values are what the ORM would give: no field of either model converts them.
    for model in (ApiToken, get_user_model()):
        assert all(not f.get_db_converters(connection) for f in model._meta.concrete_fields)


def test_unknown_revoked_expired_and_inactive_users_keys_find_nothing(world):
    alice = world.users["alice"]
    assert api_token_for_key(key="gp_unknown") is None
    revoked, revoked_key = api_token_create(user=alice, name="revoked")
    ApiToken.objects.filter(pk=revoked.pk).update(revoked_at=timezone.now())
    assert api_token_for_key(key=revoked_key) is None
    expired, expired_key = api_token_create(user=alice, name="expired", expires_at=timezone.now() + timedelta(days=1))
    ApiToken.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert api_token_for_key(key=expired_key) is None
    _, bob_key = api_token_create(user=world.users["bob"], name="bob")
    assert api_token_for_key(key=bob_key) is not None
    get_user_model().objects.filter(pk=world.users["bob"].pk).update(is_active=False)
    assert api_token_for_key(key=bob_key) is None
