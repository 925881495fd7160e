"""The control-loop tests use the Kubernetes tests' fake API server and backend fixtures."""

from tests.k8s.conftest import backend, kube  # noqa: F401  (fixtures, registered by import)
