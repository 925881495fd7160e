"""The API tokens page in a real browser: a member creates a named token with an expiry, sees the key
once with the lines that configure the client, copies it, uses it from ``gpuportal``, and revokes it."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from gpuportal import AuthenticationError, Portal
from portal.tokens.models import ApiToken
from tests.browser.conftest import assert_nothing_overflows, login, screenshot


@pytest.mark.django_db(transaction=True)
def test_a_member_creates_a_token_sees_it_once_uses_it_from_the_client_and_revokes_it(
    page, world, live_server, tmp_path
):
    login(page, "alice")
    page.get_by_role("link", name="Tokens").click()
    page.fill("input[name=name]", "laptop notebook")
    page.fill("input[name=expires_in_days]", "30")
    page.get_by_role("button", name="Create token").click()

    key = page.locator("#new-key").inner_text().strip()
    assert key.startswith("gpt_")
    usage = page.locator("#token-usage").inner_text()
    assert f"export GPUPORTAL_URL={live_server.url}\n" in usage
    assert f"export GPUPORTAL_TOKEN={key}\n" in usage
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server.url)
    page.get_by_role("button", name="Copy key").click()
    expect(page.locator(".copy-state").first).to_have_text("copied")
    assert page.evaluate("navigator.clipboard.readText()") == key
    assert_nothing_overflows(page)
    screenshot(page, "token-created", tmp_path)

    # Stored as a hash only, with the expiry asked for.
    token = ApiToken.objects.get(user=world.users["alice"], name="laptop notebook")
    assert token.key_hash == hashlib.sha256(key.encode()).hexdigest()
    assert key not in (token.prefix, token.key_hash, token.name)
    assert token.expires_at is not None
    assert abs(token.expires_at - (timezone.now() + timedelta(days=30))) < timedelta(minutes=5)

    # The key works from the client (the lines above, as arguments).
    assert Portal(live_server.url, key).teams() == ["vision"]

    # Shown once: the list shows its name and prefix, never the key again.
    page.goto("/account/tokens/")
    assert key not in page.content()
    row = page.locator("tbody tr", has_text="laptop notebook")
    expect(row).to_contain_text(token.prefix)
    expect(row).to_contain_text("active")
    screenshot(page, "token-list", tmp_path)

    row.get_by_role("button", name="Revoke").click()
    expect(page.locator("tbody tr", has_text="laptop notebook")).to_contain_text("revoked")
    with pytest.raises(AuthenticationError):
        Portal(live_server.url, key).teams()
