"""``manage.py cluster_check``: what the portal sees in the configured cluster, and what is missing.

Prints each node (GPU model, devices, free devices, free CPU and memory, zone and rack, problems),
the GPU models found, and for the Kubernetes backend whether the portal's identity has the RBAC it
needs in every team namespace. Exits 1 when the cluster cannot be read or a permission is missing.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from portal.jobs.models import GpuModel, ReplicaPlacement
from portal.jobs.states import ACTIVE_STATES
from portal.tenants.models import Team
from scheduling.adapters.factory import cluster_backend
from scheduling.adapters.k8s.nodes import node_problems
from scheduling.engine.model import ForeignUsage, GpuNode

# (verb, resource, subresource, namespaced): what the portal does (deploy/rbac.yaml grants exactly this).
REQUIRED_ACCESS = (
    ("list", "nodes", "", False),
    ("watch", "nodes", "", False),
    ("list", "pods", "", False),
    ("watch", "pods", "", False),
    ("create", "pods", "", True),
    ("delete", "pods", "", True),
    ("create", "pods", "binding", True),
    ("create", "events", "", True),
    # The namespace sync (docs/kubernetes.md, Team namespaces).
    ("get", "resourcequotas", "", True),
    ("create", "resourcequotas", "", True),
    ("update", "resourcequotas", "", True),
    ("get", "limitranges", "", True),
    ("create", "limitranges", "", True),
    ("update", "limitranges", "", True),
    ("list", "services", "", False),  # training jobs' headless Services
    ("create", "services", "", True),
    ("delete", "services", "", True),
    # Ray jobs: KubeRay's objects (resource.group, as kubectl writes it)
    ("list", "rayjobs.ray.io", "", False),
    ("create", "rayjobs.ray.io", "", True),
    ("delete", "rayjobs.ray.io", "", True),
    ("list", "rayclusters.ray.io", "", False),
    ("create", "rayclusters.ray.io", "", True),
    ("delete", "rayclusters.ray.io", "", True),
)


@dataclass
class _NodeUsage:
    """Devices, CPU and memory held per node by the portal's active jobs and by foreign pods."""

    devices: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    cpu: Counter[str] = field(default_factory=Counter)
    memory: Counter[str] = field(default_factory=Counter)

    @classmethod
    def of(cls, foreign: list[ForeignUsage]) -> _NodeUsage:
        used = cls()
        for p in ReplicaPlacement.objects.filter(job__state__in=ACTIVE_STATES):
            used.devices[p.node].update(p.gpu_indices)
            used.cpu[p.node] += p.cpu_milli
            used.memory[p.node] += p.memory_mib
        for usage in foreign:
            used.devices[usage.node].update(usage.gpu_indices)
            used.cpu[usage.node] += usage.cpu_milli
            used.memory[usage.node] += usage.memory_mib
        return used


class Command(BaseCommand):
    help = "Print the nodes, GPU models, free capacity and problems the portal sees in the configured cluster."

    def handle(self, *args, **options) -> None:
        backend = cluster_backend()
        self.stdout.write(f"cluster backend: {backend.name}")
        try:
            if hasattr(backend, "sync"):
                backend.sync()
            nodes = backend.nodes()
            foreign = backend.foreign_usage()
        except Exception as exc:
            raise CommandError(f"cannot read the cluster: {exc}") from exc
        problems_of: dict[str, list[str]] = {}
        if hasattr(backend, "raw_nodes"):
            problems_of = {
                raw["metadata"]["name"]: node_problems(raw, rack_label=settings.K8S_RACK_LABEL)
                for raw in backend.raw_nodes()
            }
        models = self.print_nodes(nodes, _NodeUsage.of(foreign), problems_of)
        self.print_models(models)
        gaps = self.rbac_gaps(backend)
        for gap in gaps:
            self.stdout.write(f"  ! RBAC: cannot {gap}")
        if gaps:
            raise CommandError(f"{len(gaps)} permissions missing (see deploy/rbac.yaml)")
        self.stdout.write(f"{len(nodes)} nodes, {sum(models.values())} GPUs")

    def print_nodes(self, nodes: list[GpuNode], used: _NodeUsage, problems_of: dict[str, list[str]]) -> Counter[str]:
        """One line per node, its problems below it; returns the GPUs per model."""
        header = f"{'NODE':<28} {'GPU MODEL':<18} {'GPUS':>4} {'FREE':>4} {'CPU FREE':>9} {'MEM FREE':>10} ZONE/RACK"
        self.stdout.write(header)
        models: Counter[str] = Counter()
        for node in nodes:
            labels = dict(node.labels)
            free = max(0, node.gpu_count - len(used.devices[node.name]))
            if node.gpu_model:
                models[node.gpu_model] += node.gpu_count
            kind = (node.gpu_model or "-") + (" (MIG)" if node.mig_enabled else "")
            where = f"{labels.get('topology.kubernetes.io/zone', '-')}/{labels.get(settings.K8S_RACK_LABEL, '-')}"
            self.stdout.write(
                f"{node.name:<28} {kind:<18} {node.gpu_count:>4} {free:>4} "
                f"{(node.cpu_milli - used.cpu[node.name]) / 1000:>8.1f}c "
                f"{(node.memory_mib - used.memory[node.name]) / 1024:>7.1f}GiB {where}"
            )
            problems = list(problems_of.get(node.name, []))
            if node.unschedulable and not problems:
                problems.append("cordoned")
            for problem in problems:
                self.stdout.write(f"    ! {problem}")
        return models

    def print_models(self, models: Counter[str]) -> None:
        known = set(GpuModel.objects.values_list("name", flat=True))
        self.stdout.write("GPU models: " + (", ".join(f"{m} ×{n}" for m, n in sorted(models.items())) or "none"))
        for model in sorted(set(models) - known):
            self.stdout.write(f"  ! {model} is not a portal GPU model: add it (admin) so queues can hold quota for it")
        if not models:
            self.stdout.write("  ! no node advertises nvidia.com/gpu: is the NVIDIA device plugin installed?")

    def rbac_gaps(self, backend) -> list[str]:
        review = getattr(backend, "access_review", None)
        if review is None:
            return []
        namespaces = list(Team.objects.order_by("namespace").values_list("namespace", flat=True))
        gaps = []
        for verb, resource, subresource, namespaced in REQUIRED_ACCESS:
            for namespace in namespaces if namespaced else [""]:
                if not review(verb=verb, resource=resource, namespace=namespace, subresource=subresource):
                    what = f"{verb} {resource}{'/' + subresource if subresource else ''}"
                    gaps.append(f"{what} in {namespace}" if namespace else f"{what} (cluster-wide)")
        return gaps
