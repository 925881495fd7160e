"""The Kubernetes fixtures (the in-test API server and the real client) for the services' backend test."""

from tests.scheduling.adapters.conftest import backend, kube, kworld  # noqa: F401 - fixtures
