"""Shared fixtures. Database tests run on the real PostgreSQL named by DATABASE_URL (see Makefile)."""

from __future__ import annotations

import os
import uuid

import pytest
from django.core.cache import caches
from hypothesis import settings as hypothesis_settings
from rest_framework.test import APIClient

from portal.celery import app as celery_app
from portal.tokens.services import api_token_create
from tests.factories import World, build_world

# Hypothesis: the suite (and CI) runs derandomized, so the same tree passes or fails the same way every
# time; `HYPOTHESIS_PROFILE=explore` searches with fresh random examples (with ENGINE_EXAMPLES=400 for
# the engine's properties). What an exploring run finds becomes a hand-written regression test.
hypothesis_settings.register_profile("ci", derandomize=True, print_blob=True)
hypothesis_settings.register_profile("explore", derandomize=False, print_blob=True)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    # PBKDF2 with Django's default cost takes ~0.3 s per user on this machine; tests need no strength.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _fresh_security_state(settings, request):
    """Each test gets its own empty throttle counters (a cache of its own), so one test's requests
    never throttle the next. django-axes is off by default because ``Client.login`` authenticates
    without a request, which axes refuses; the brute-force tests turn it on (``axes_on``)."""
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": f"test-{id(request)}"}
    }
    settings.AXES_ENABLED = False
    from scheduling.services import CYCLE_REQUESTED_KEY, cycle_key, redis_client

    if (client := redis_client()) is not None:
        client.delete(cycle_key(CYCLE_REQUESTED_KEY))  # a cycle request one test left must not swallow the next's


@pytest.fixture
def axes_on(settings):
    settings.AXES_ENABLED = True


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
    """An API client factory: api("alice") is authenticated as alice with a token of her own."""
    keys: dict[str, str] = {}

    def client_for(username: str) -> APIClient:
        if username not in keys:
            keys[username] = api_token_create(user=world.users[username], name="tests")[1]
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {keys[username]}")
        return client

    return client_for


@pytest.fixture
def redis_cache(settings):
    """The web processes' shared cache (the tests' default is a local one)."""
    if not settings.REDIS_URL:
        pytest.skip("needs REDIS_URL")
    prefix = f"cache-test-{uuid.uuid4().hex}"
    settings.CACHES = {
        "default": {
            "BACKEND": "portal.cache.RedisCache",
            "LOCATION": settings.REDIS_URL,
            "KEY_PREFIX": prefix,
        }
    }
    yield
    client = caches["default"]._cache.get_client(write=True)  # its own keys only: the broker shares the db
    for key in client.scan_iter(f"{prefix}:*"):
        client.delete(key)
