"""Fixtures of the control loop's tests; the Kubernetes ones come from the adapter tests' fake API server."""

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
    client.delete(services.CYCLE_AGAIN_KEY)
