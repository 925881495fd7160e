"""Shared fixtures. Database tests run on the real PostgreSQL named by DATABASE_URL (see Makefile)."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from portal.celery import app as celery_app
from tests.factories import World, build_world


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    # PBKDF2 with Django's default cost takes ~0.3 s per user on this machine; tests need no strength.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _eager_celery():
    """Run tasks in-process unless a test starts real workers (those set their own configuration)."""
    previous = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = previous


@pytest.fixture
def world(db) -> World:
    return build_world()


@pytest.fixture
def api(world):
    """An API client factory: api("alice") is authenticated as alice with her token."""
    from rest_framework.authtoken.models import Token

    def client_for(username: str) -> APIClient:
        client = APIClient()
        token, _ = Token.objects.get_or_create(user=world.users[username])
        client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
        return client

    return client_for
