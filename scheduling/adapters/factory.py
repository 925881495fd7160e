"""The one place that knows every cluster backend: ``cluster_backend()`` picks one from settings.

Callers that only need the contract import ``scheduling.adapters.contract``. The Kubernetes backend
is imported on first use, so processes on the simulated cluster never load the ``kubernetes`` client
(an import cost of about half a second, not a cycle: no backend imports this module).
"""

from __future__ import annotations

from django.conf import settings

from scheduling.adapters.contract import ClusterBackend
from scheduling.adapters.simulated import SimulatedCluster


def cluster_backend() -> ClusterBackend:
    """The backend named by ``CLUSTER_BACKEND`` (``simulated`` or ``kubernetes``)."""
    if settings.CLUSTER_BACKEND == "kubernetes":
        from scheduling.adapters.kubernetes import KubernetesBackend

        return KubernetesBackend.from_settings()
    return SimulatedCluster(speedup=settings.SIM_SPEEDUP)
