"""Item 8: API tokens stored hashed with expiry and revocation; SECRET_KEY and placeholders refused
without DEBUG; ``manage.py check --deploy`` clean with the production settings of ``deploy/``."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from django.utils import timezone
from rest_framework.test import APIClient

from portal.tokens.models import ApiToken
from portal.tokens.services import api_token_create

ROOT = Path(__file__).resolve().parents[2]


def client_with(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


@pytest.mark.django_db
def test_a_token_is_stored_only_as_a_hash_and_works_until_revoked(world):
    token, key = api_token_create(user=world.users["alice"], name="notebook")
    stored = ApiToken.objects.values_list("prefix", "key_hash", "name").get(pk=token.pk)
    assert key not in "".join(stored)
    assert client_with(key).get("/api/v1/jobs/").status_code == 200
    token.refresh_from_db()
    assert token.last_used_at is not None
    ApiToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now())
    assert client_with(key).get("/api/v1/jobs/").status_code == 401


@pytest.mark.django_db
def test_an_expired_token_and_an_inactive_users_token_are_refused(world):
    _, expiring = api_token_create(
        user=world.users["alice"], name="short", expires_at=timezone.now() + timedelta(hours=1)
    )
    assert client_with(expiring).get("/api/v1/jobs/").status_code == 200
    ApiToken.objects.filter(name="short").update(expires_at=timezone.now() - timedelta(seconds=1))
    assert client_with(expiring).get("/api/v1/jobs/").status_code == 401
    _, bobs = api_token_create(user=world.users["bob"], name="bob")
    world.users["bob"].is_active = False
    world.users["bob"].save()
    assert client_with(bobs).get("/api/v1/jobs/").status_code == 401


@pytest.mark.django_db
def test_users_create_name_list_and_revoke_their_own_tokens_on_a_page_and_see_the_key_once(client, world):
    client.force_login(world.users["alice"])
    created = client.post("/account/tokens/", {"name": "laptop", "expires_in_days": "30"})
    assert created.status_code == 200
    key = created.context["new_key"]
    assert key.startswith("gpt_")
    assert key in created.content.decode()
    assert created["Cache-Control"] == "no-store"
    listed = client.get("/account/tokens/")
    assert "laptop" in listed.content.decode()
    assert key not in listed.content.decode()
    assert client_with(key).get("/api/v1/jobs/").status_code == 200
    token = ApiToken.objects.get(name="laptop")
    assert token.expires_at is not None
    # bob cannot revoke alice's token; alice can.
    client.force_login(world.users["bob"])
    assert client.post(f"/account/tokens/{token.pk}/revoke/").status_code == 404
    client.force_login(world.users["alice"])
    assert client.post(f"/account/tokens/{token.pk}/revoke/").status_code == 302
    assert client_with(key).get("/api/v1/jobs/").status_code == 401
    assert "revoked" in client.get("/account/tokens/").content.decode()


def test_old_plain_text_tokens_are_migrated_to_hashes_and_keep_working(django_db_blocker, django_db_setup):
    """The data migration (tokens 0002) hashes every authtoken key and deletes the plain-text rows."""
    import importlib

    from django.apps import apps
    from django.contrib.auth.models import User
    from rest_framework.authtoken.models import Token

    migration = importlib.import_module("portal.tokens.migrations.0002_hash_authtoken_keys")
    with django_db_blocker.unblock():
        from django.db import transaction

        with transaction.atomic():
            user = User.objects.create_user("legacy", password="x")
            old = Token.objects.create(user=user)
            migration.forwards(apps, None)
            assert not Token.objects.exists()
            assert client_with(old.key).get("/api/v1/jobs/").status_code == 200
            transaction.set_rollback(True)


def run_settings(env: dict[str, str]) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "DEBUG", "METRICS_TOKEN")}
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); print('started')"],
        cwd=ROOT, env={**clean, "DJANGO_SETTINGS_MODULE": "portal.settings", **env},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_without_secret_key_the_portal_refuses_to_start_unless_debug_is_on():
    refused = run_settings({})
    assert refused.returncode != 0
    assert "SECRET_KEY is not set" in refused.stderr
    assert run_settings({"DEBUG": "1"}).stdout.strip() == "started"
    placeholder = run_settings({"SECRET_KEY": "change-me-to-a-long-random-string"})
    assert "placeholder" in placeholder.stderr
    metrics = run_settings({"SECRET_KEY": "x" * 50, "METRICS_TOKEN": "change-me-to-a-random-token"})
    assert "METRICS_TOKEN is still the placeholder" in metrics.stderr


def test_check_deploy_is_clean_with_the_production_settings_of_deploy():
    docs = [doc for path in sorted((ROOT / "deploy").glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text())]
    config = next(d for d in docs if d and d["kind"] == "ConfigMap")["data"]
    secret = next(d for d in docs if d and d["kind"] == "Secret")["stringData"]
    env = {
        **config,
        **secret,
        "SECRET_KEY": secrets.token_urlsafe(50),
        "METRICS_TOKEN": secrets.token_urlsafe(32),
        "CLUSTER_BACKEND": "simulated",
    }
    clean = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT, env={**clean, **env, "DJANGO_SETTINGS_MODULE": "portal.settings"},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout
