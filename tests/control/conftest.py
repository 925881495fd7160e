"""The control-loop tests use the Kubernetes tests' fake API server and backend fixtures."""

from tests.scheduling.adapters.conftest import backend, kube  # noqa: F401  (fixtures, registered by import)
