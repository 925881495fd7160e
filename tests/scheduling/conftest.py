"""Fixtures of the control loop's tests; the Kubernetes ones come from the adapter tests' fake API server."""

import uuid

import pytest

from scheduling import services
from tests.factories import build_world
from tests.scheduling.adapters.conftest import backend, kube  # noqa: F401  (fixtures, registered by import)


@pytest.fixture
def kworld(db):
    """A world whose GPU nodes come from the fake Kubernetes API, not from simulated rows."""
    return build_world(a100_nodes=0, t4_nodes=0)


@pytest.fixture
def redis_db(settings):
    if not settings.REDIS_URL:
        pytest.skip("needs REDIS_URL")
    client = services.redis_client()
    yield client
    client.delete(services.cycle_key(services.CYCLE_AGAIN_KEY))


@pytest.fixture
def cycle_keys(redis_db, monkeypatch):
    """The cycle request's Redis keys under names of this test's own (the test processes share a Redis db)."""
    tag = uuid.uuid4().hex
    monkeypatch.setattr(services, "CYCLE_REQUESTED_KEY", f"test-{tag}:cycle-requested")
    monkeypatch.setattr(services, "CYCLE_STATE_KEY", f"test-{tag}:cycle-state")
    yield redis_db
    redis_db.delete(*(services.cycle_key(k) for k in (services.CYCLE_REQUESTED_KEY, services.CYCLE_STATE_KEY)))
