"""Django-side state of the scheduling adapters (the pure engine lives in ``scheduling.engine``)."""

from __future__ import annotations

from decimal import Decimal

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from scheduling.engine.pools import MAX_OVERCOMMIT


class SimNode(models.Model):
    """A node of the simulated cluster (the embedded default backend)."""

    name = models.CharField(max_length=253, unique=True)
    gpu_model = models.ForeignKey(
        "jobs.GpuModel", null=True, blank=True, on_delete=models.PROTECT, related_name="sim_nodes"
    )
    gpu_count = models.PositiveIntegerField(default=0)
    cpu_milli = models.PositiveIntegerField()
    memory_mib = models.PositiveBigIntegerField()
    labels = models.JSONField(default=dict, blank=True)
    taints = models.JSONField(default=list, blank=True, help_text='[{"key":..., "value":..., "effect":...}]')
    unschedulable = models.BooleanField(default=False, help_text="Cordoned.")
    mig_enabled = models.BooleanField(default=False)

    class Meta:
        ordering = ["name"]
        verbose_name = "simulated node"

    def __str__(self) -> str:
        return f"{self.name} ({self.gpu_count}× {self.gpu_model or 'CPU'})"


class CycleRun(models.Model):
    """One scheduling cycle, for the dashboard and for debugging."""

    started_at = models.DateTimeField(db_index=True)
    duration_ms = models.FloatField()
    pending = models.PositiveIntegerField(default=0)
    admitted = models.PositiveIntegerField(default=0)
    preempted = models.PositiveIntegerField(default=0)
    allocated_gpus = models.FloatField(default=0.0, help_text="GPUs held after the cycle (shares summed).")
    total_gpus = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-started_at"]

    def __str__(self) -> str:
        return f"cycle at {self.started_at:%Y-%m-%d %H:%M:%S}: {self.admitted} admitted in {self.duration_ms:.0f} ms"


class NodePool(models.Model):
    """A group of nodes with its own placement (KAI/Run:ai node pools), kept by platform admins.

    A node is in the first pool, by ``order`` then name, whose ``node_selector`` labels it has; the
    engine reads the pools from its snapshot (``scheduling.engine.pools``)."""

    class Placement(models.TextChoices):
        DEFAULT = "", "the cluster's default (PLACEMENT_POLICY)"
        BINPACK = "binpack", "bin-pack: fill the fullest node first"
        SPREAD = "spread", "spread: the emptiest node first"
        PORTAL = "portal", "portal: fragmentation-aware (FGD, refined)"
        FGD = "fgd", "fgd: fragmentation gradient descent"

    name = models.SlugField(max_length=63, unique=True)
    node_selector = models.JSONField(
        default=dict, help_text='Node labels a node must have to be in the pool, e.g. {"gpu.type": "a10g"}.'
    )
    placement = models.CharField(max_length=20, choices=Placement.choices, blank=True, default=Placement.DEFAULT)
    overcommit_ratio = models.DecimalField(
        max_digits=4,
        decimal_places=2,
        default=Decimal("1.00"),
        validators=[MinValueValidator(Decimal("1.00")), MaxValueValidator(Decimal(str(MAX_OVERCOMMIT)))],
        help_text="Fractional GPU requests may share a device up to this many times its capacity "
        "(1.2 = 120 %). Quota and cost count the requested shares.",
    )
    order = models.PositiveSmallIntegerField(default=0, help_text="Pools are matched in this order, then by name.")
    description = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["order", "name"]
        verbose_name = "node pool"

    def __str__(self) -> str:
        return self.name


class NamespaceObject(models.Model):
    """A team namespace's ResourceQuota or LimitRange as the last namespace sync found it.

    ``drift`` lists how the live object differed from the portal's (empty when it matched); the sync
    repairs it in the same pass (``action``) and counts the repairs. The cluster page and /metrics
    read these rows (``scheduling.selectors.namespace_objects``)."""

    namespace = models.CharField(max_length=63)
    kind = models.CharField(max_length=20, help_text="ResourceQuota or LimitRange")
    name = models.CharField(max_length=253)
    in_sync = models.BooleanField(default=True, help_text="Matched the portal's object when last checked.")
    drift = models.JSONField(default=list, blank=True, help_text="How it differed, in words.")
    action = models.CharField(max_length=300, blank=True, help_text="none, created, replaced or failed: why")
    checked_at = models.DateTimeField()
    repaired_at = models.DateTimeField(null=True, blank=True)
    repairs = models.PositiveIntegerField(default=0, help_text="Times the sync found drift and rewrote it.")
    wanted = models.JSONField(default=dict, blank=True, help_text="The object the portal wants.")

    class Meta:
        ordering = ["namespace", "kind"]
        constraints = [models.UniqueConstraint(fields=["namespace", "kind"], name="uniq_namespace_object")]

    def __str__(self) -> str:
        return f"{self.namespace} {self.kind}: {'in sync' if self.in_sync else 'drifted'}"
