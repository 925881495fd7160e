"""The API tokens page (``portal.tokens.views``): the key once with the lines that configure the
client, a clear error for a bad name or expiry, and every state in the list."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from portal.tokens.models import ApiToken
from portal.tokens.services import api_token_create

pytestmark = pytest.mark.django_db


def test_a_new_key_comes_with_the_environment_lines_for_this_portal(client, world):
    client.force_login(world.users["alice"])
    created = client.post("/account/tokens/", {"name": "notebook"})
    key = created.context["new_key"]
    page = created.content.decode()
    assert "export GPUPORTAL_URL=http://testserver\n" in page  # the address the page was asked at
    assert f"export GPUPORTAL_TOKEN={key}\n" in page
    assert ApiToken.objects.get(name="notebook").expires_at is None  # no expiry asked: never expires
    assert "never" in client.get("/account/tokens/").content.decode()


@pytest.mark.parametrize(
    ("form", "field", "message"),
    [
        ({"name": ""}, "name", "This field is required."),
        ({"name": "x" * 101}, "name", "at most 100 characters"),
        ({"name": "x", "expires_in_days": "0"}, "expires_in_days", "greater than or equal to 1"),
        ({"name": "x", "expires_in_days": "soon"}, "expires_in_days", "Enter a whole number."),
    ],
)
def test_a_bad_name_or_expiry_is_refused_naming_the_field_and_nothing_is_created(client, world, form, field, message):
    client.force_login(world.users["alice"])
    refused = client.post("/account/tokens/", form)
    assert refused.status_code == 400
    assert any(message in error for error in refused.context["form"].errors[field])
    assert refused.context["new_key"] is None
    assert not ApiToken.objects.exists()


def test_the_list_shows_active_expired_and_revoked_tokens_of_the_user_only(client, world):
    api_token_create(user=world.users["alice"], name="active one")
    expired, _ = api_token_create(
        user=world.users["alice"], name="expired one", expires_at=timezone.now() + timedelta(hours=1)
    )
    ApiToken.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(hours=1))
    revoked, _ = api_token_create(user=world.users["alice"], name="revoked one")
    ApiToken.objects.filter(pk=revoked.pk).update(revoked_at=timezone.now())
    api_token_create(user=world.users["bob"], name="bobs")
    client.force_login(world.users["alice"])
    states = {token.name: state for token, state in client.get("/account/tokens/").context["tokens"]}
    assert states == {"active one": "active", "expired one": "expired", "revoked one": "revoked"}
