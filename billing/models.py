"""Metered usage, its hourly rollup, the price book, recorded capacity and team budgets.

Units (``billing.core.units``). GPU shares are counted exactly as integers in 1/7000 of a GPU (the
billed share, ``scheduling.engine.shares.BILLED_UNITS_PER_GPU``): whole GPUs (7000), thousandths of a
GPU (7 each) and MIG slices (a ``3g`` slice of a 7-slice GPU is 3000) are all whole numbers of it.
Durations are whole microseconds (PostgreSQL's resolution), so GPU usage ``gpu_share_7000ths ×
duration_us`` is an exact integer and sums of it never round.
"""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models

from billing.core.advice import budget_used_pct


class CapacityType(models.TextChoices):
    ON_DEMAND = "on-demand"
    SPOT = "spot"
    RESERVED = "reserved"
    OFF_PEAK = "off-peak"  # a price tier, not a kind of node: jobs that start only in the off-peak hours


class UsageRecord(models.Model):
    """GPU, CPU and memory consumed by one job over one closed Running interval.

    ``gpu_seconds`` counts shares: 0.25 GPU for an hour is 900 GPU-seconds; a 3g MIG slice is 3/7 GPU.
    It is rounded to the microsecond for display; ``gpu_usage`` is the exact figure sums are made of.
    The unique (job, start) key makes re-metering a no-op.
    """

    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="usage_records")
    team = models.ForeignKey("tenants.Team", on_delete=models.CASCADE, related_name="usage_records")
    namespace = models.CharField(max_length=63, db_index=True)
    local_queue = models.CharField(max_length=63)
    cluster_queue = models.CharField(max_length=63)
    gpu_model = models.CharField(max_length=64, blank=True, db_index=True)
    capacity_type = models.CharField(max_length=20, default="on-demand")
    start = models.DateTimeField(db_index=True)
    end = models.DateTimeField()
    gpus = models.DecimalField(max_digits=12, decimal_places=6, help_text="GPUs held (shares summed).")
    gpu_seconds = models.DecimalField(max_digits=24, decimal_places=6)
    cpu_core_seconds = models.DecimalField(max_digits=24, decimal_places=6)
    memory_gib_seconds = models.DecimalField(max_digits=24, decimal_places=6)
    # Exact integer figures (see the module docstring); rollups and the allocation API sum these.
    gpu_share_7000ths = models.PositiveBigIntegerField(default=0, help_text="GPU share held, 1/7000 GPU.")
    duration_us = models.PositiveBigIntegerField(default=0)
    gpu_usage = models.DecimalField(
        max_digits=32, decimal_places=0, default=0, help_text="gpu_share_7000ths × duration_us."
    )
    cpu_milli_us = models.DecimalField(max_digits=32, decimal_places=0, default=0)
    memory_mib_us = models.DecimalField(max_digits=32, decimal_places=0, default=0)
    # Average GPU utilization (0-100 %) and framebuffer use over the interval, when measured.
    gpu_util_pct = models.FloatField(null=True, blank=True)
    gpu_fb_used_mib = models.FloatField(null=True, blank=True)
    labels = models.JSONField(default=dict, blank=True, help_text="Labels to aggregate by (label:<key>).")

    class Meta:
        ordering = ["start", "id"]
        constraints = [models.UniqueConstraint(fields=["job", "start"], name="uniq_usage_interval")]
        indexes = [models.Index(fields=["team", "start"]), models.Index(fields=["end"])]

    def __str__(self) -> str:
        return f"job {self.job_id} {self.start:%Y-%m-%d %H:%M}: {self.gpu_seconds} GPU-s"


class HourUsageColumns(models.Model):
    """The usage summed in an hourly rollup row (``billing.core.usage.HourUsage``)."""

    # One hour of one key fits 64 bits (e.g. 366,000 GPUs' usage), and PostgreSQL sums bigints in
    # 128-bit accumulators: exact and several times faster than NUMERIC for the allocation query.
    gpu_usage = models.BigIntegerField(default=0)
    cpu_milli_us = models.BigIntegerField(default=0)
    memory_mib_us = models.BigIntegerField(default=0)
    # Σ utilization % × gpu_usage over the measured part (a weight, not money: a float is enough),
    # and that part's gpu_usage.
    gpu_util_usage = models.FloatField(default=0.0)
    gpu_util_measured_usage = models.BigIntegerField(default=0)

    class Meta:
        abstract = True


class UsageHourly(HourUsageColumns):
    """Usage records cut at hour boundaries and summed per hour and key: what the allocation API reads.

    Written in the same transaction as the records it sums (``billing.services.metering.metering_run``), so it is
    always exactly the records' sum; ``manage.py billing_rollup_rebuild`` recomputes it from them.
    """

    # Hours since 1970-01-01 00:00 UTC: integer arithmetic buckets it into steps on any database.
    epoch_hour = models.PositiveIntegerField()
    team = models.ForeignKey("tenants.Team", on_delete=models.CASCADE, related_name="+")
    local_queue = models.CharField(max_length=63)
    cluster_queue = models.CharField(max_length=63)
    gpu_model = models.CharField(max_length=64, blank=True)
    capacity_type = models.CharField(max_length=20)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["epoch_hour", "team", "local_queue", "cluster_queue", "gpu_model", "capacity_type"],
                name="uniq_usage_hourly",
            )
        ]
        indexes = [models.Index(fields=["epoch_hour", "team"])]
        verbose_name_plural = "usage hourly rollups"

    def __str__(self) -> str:
        return f"hour {self.epoch_hour} team {self.team_id} {self.gpu_model or 'CPU'} {self.capacity_type}"


class UsageGroupHourly(HourUsageColumns):
    """Usage records cut at hour boundaries and summed per hour, team, job owner, label set, GPU model and
    capacity type: what the cost by user and by label (``aggregate=label:<key>``) read.

    Written with ``UsageHourly`` in the same transaction as the records it sums, so it is always exactly
    their sum. ``labels`` is the records' label set; ``labels_text`` its canonical JSON (sorted keys,
    ``billing.core.usage.labels_text``), which keys the row (a label set can be longer than an index entry,
    so the unique key holds its hash).
    """

    epoch_hour = models.PositiveIntegerField()
    team = models.ForeignKey("tenants.Team", on_delete=models.CASCADE, related_name="+")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    labels_hash = models.CharField(max_length=64, help_text="SHA-256 of labels_text.")
    labels_text = models.TextField()
    labels = models.JSONField(default=dict)
    gpu_model = models.CharField(max_length=64, blank=True)
    capacity_type = models.CharField(max_length=20)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["epoch_hour", "team", "owner", "labels_hash", "gpu_model", "capacity_type"],
                name="uniq_usage_group_hourly",
            )
        ]
        verbose_name_plural = "usage group hourly rollups"

    def __str__(self) -> str:
        return f"hour {self.epoch_hour} team {self.team_id} owner {self.owner_id} {self.labels_text}"


class TeamCostColumns(models.Model):
    """A team's usage and its exact cost numerators (usage × price in 10^-6 USD) over a span."""

    gpu_usage = models.BigIntegerField(default=0)
    cpu_milli_us = models.BigIntegerField(default=0)
    memory_mib_us = models.BigIntegerField(default=0)
    gpu_cost_units = models.DecimalField(max_digits=40, decimal_places=0, default=0)
    cpu_cost_units = models.DecimalField(max_digits=40, decimal_places=0, default=0)
    memory_cost_units = models.DecimalField(max_digits=40, decimal_places=0, default=0)
    gpu_util_usage = models.FloatField(default=0.0)
    gpu_util_measured_usage = models.BigIntegerField(default=0)

    class Meta:
        abstract = True


class TeamCostHourly(TeamCostColumns):
    """Usage and its exact cost per team and hour, priced with the price book of ``CostRollupState``.

    What the namespace and team allocation reads: one row per team-hour, so a 30-day hourly query
    returns rows without aggregating. Cost numerators are exact integers (usage × price in 10^-6 USD).
    A price book change makes the whole table stale; queries then price ``UsageHourly`` themselves until
    the next metering run re-prices it (``billing.services.rollups.cost_rollup_reprice``).
    """

    epoch_hour = models.PositiveIntegerField()
    team = models.ForeignKey("tenants.Team", on_delete=models.CASCADE, related_name="+")
    # The same figures divided into hours and dollars, as floats for charts (set from the exact ones by
    # ``billing.sql.TEAM_COST_FLOATS``): reading them needs no arithmetic per row.
    gpu_hours = models.FloatField(db_default=0.0)
    gpu_cost_usd = models.FloatField(db_default=0.0)
    cpu_core_hours = models.FloatField(db_default=0.0)
    cpu_cost_usd = models.FloatField(db_default=0.0)
    ram_gib_hours = models.FloatField(db_default=0.0)
    ram_cost_usd = models.FloatField(db_default=0.0)
    total_cost_usd = models.FloatField(db_default=0.0)
    gpu_efficiency = models.FloatField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["epoch_hour", "team"], name="uniq_team_cost_hourly")]
        verbose_name_plural = "team cost hourly rollups"

    def __str__(self) -> str:
        return f"hour {self.epoch_hour} team {self.team_id}"


class TeamCostDaily(TeamCostColumns):
    """``TeamCostHourly`` summed per UTC day (the exact columns): a window's whole days read one row per
    team-day instead of 24, its partial first and last days their hours (``billing.sql.team_cost_totals_sql``).
    Written in the same transaction as the hours it sums, by the same increments; rebuilt with them."""

    epoch_day = models.PositiveIntegerField(help_text="Days since 1970-01-01 UTC (epoch hour // 24).")
    team = models.ForeignKey("tenants.Team", on_delete=models.CASCADE, related_name="+")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["epoch_day", "team"], name="uniq_team_cost_daily")]
        verbose_name_plural = "team cost daily rollups"

    def __str__(self) -> str:
        return f"day {self.epoch_day} team {self.team_id}"


class GpuAllocationHourly(models.Model):
    """All tenants' GPU usage per hour, model and capacity type: what idle capacity is measured against."""

    epoch_hour = models.PositiveIntegerField()
    gpu_model = models.CharField(max_length=64, blank=True)
    capacity_type = models.CharField(max_length=20)
    gpu_usage = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["epoch_hour", "gpu_model", "capacity_type"], name="uniq_gpu_alloc_hourly")
        ]

    def __str__(self) -> str:
        return f"hour {self.epoch_hour} {self.gpu_model} {self.capacity_type}"


class CostRollupState(models.Model):
    """Which price book ``TeamCostHourly`` was priced with (one row)."""

    price_version = models.CharField(max_length=64)
    repriced_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"priced with {self.price_version[:12]} at {self.repriced_at:%Y-%m-%d %H:%M}"


class PriceBookEntry(models.Model):
    """A list price from ``effective_from`` on, until the next entry for the same item.

    Prices are never edited in place to change the past: a new price is a new entry with a later
    ``effective_from``; usage is always costed at the entry in force at the hour it was used.
    An empty ``gpu_model`` on a GPU entry is the fallback for models without an entry of their own.
    """

    class Resource(models.TextChoices):
        GPU = "gpu", "GPU-hour"
        CPU = "cpu", "CPU core-hour"
        MEMORY = "memory", "Memory GiB-hour"

    resource = models.CharField(max_length=10, choices=Resource.choices)
    gpu_model = models.CharField(max_length=64, blank=True, help_text="GPU entries only.")
    capacity_type = models.CharField(max_length=20, choices=CapacityType.choices, default=CapacityType.ON_DEMAND)
    effective_from = models.DateTimeField()
    usd_per_hour = models.DecimalField(max_digits=12, decimal_places=6, validators=[MinValueValidator(Decimal(0))])
    note = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["resource", "gpu_model", "capacity_type", "-effective_from"]
        constraints = [
            models.UniqueConstraint(
                fields=["resource", "gpu_model", "capacity_type", "effective_from"], name="uniq_price"
            )
        ]
        verbose_name_plural = "price book entries"

    def __str__(self) -> str:
        item = f"{self.gpu_model or 'any'} GPU" if self.resource == self.Resource.GPU else self.resource
        return f"{item} {self.capacity_type} ${self.usd_per_hour}/h from {self.effective_from:%Y-%m-%d}"


class CapacitySnapshot(models.Model):
    """GPUs in the cluster per model and capacity type, from ``at`` until the next snapshot.

    Recorded periodically (``billing.tasks.capacity_record_task``) but stored only when the figures change,
    so the table is a step function: a model absent from the newest set has no GPUs from then on.
    """

    at = models.DateTimeField(db_index=True)
    gpu_model = models.CharField(max_length=64)
    capacity_type = models.CharField(max_length=20)
    gpu_count = models.PositiveIntegerField()
    node_count = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["at", "gpu_model", "capacity_type"]
        constraints = [
            models.UniqueConstraint(fields=["at", "gpu_model", "capacity_type"], name="uniq_capacity_snapshot")
        ]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.gpu_model} {self.capacity_type}: {self.gpu_count} GPUs"


class Budget(models.Model):
    """A team's monthly GPU spend limit (calendar month, UTC)."""

    team = models.OneToOneField("tenants.Team", on_delete=models.CASCADE, related_name="budget")
    monthly_gpu_usd = models.DecimalField(max_digits=14, decimal_places=2, validators=[MinValueValidator(Decimal(0))])
    hard_stop = models.BooleanField(
        default=False, help_text="At 100 % the scheduler starts no new job of the team until the month ends."
    )
    alert_emails = models.CharField(
        max_length=500, blank=True, help_text="Comma-separated; team admins are always notified."
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["team__name"]

    def __str__(self) -> str:
        return f"{self.team}: ${self.monthly_gpu_usd}/month" + (" (hard stop)" if self.hard_stop else "")


class BudgetAlert(models.Model):
    """One threshold crossed by one team in one month; the unique key makes alerting idempotent."""

    team = models.ForeignKey("tenants.Team", on_delete=models.CASCADE, related_name="budget_alerts")
    month = models.DateField(help_text="First day of the month.")
    threshold_pct = models.PositiveSmallIntegerField()
    spend_usd = models.DecimalField(max_digits=14, decimal_places=2)
    budget_usd = models.DecimalField(max_digits=14, decimal_places=2)
    created_at = models.DateTimeField()
    emailed_to = models.CharField(max_length=1000, blank=True)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["team", "month", "threshold_pct"], name="uniq_budget_alert")]

    def __str__(self) -> str:
        return f"{self.team} {self.month:%Y-%m}: {self.threshold_pct} % (${self.spend_usd} of ${self.budget_usd})"

    @property
    def used_pct(self) -> float:
        """The month's spend over the budget when the alert was raised, in percent (past the threshold:
        one check may cross both)."""
        return budget_used_pct(spend_usd=self.spend_usd, budget_usd=self.budget_usd)


class IdlePolicy(models.Model):
    """A cluster queue's idle-GPU policy (dstack's utilization policy): a running job whose GPUs all
    stay under ``below_pct`` utilization for ``minutes`` is flagged on its page and, with ``stop``, is
    stopped (it fails with the reason) and its owner told (the failure notification)."""

    class Action(models.TextChoices):
        FLAG = "flag", "flag the job on its page"
        STOP = "stop", "flag, stop the job and tell its owner"

    cluster_queue = models.OneToOneField("jobs.ClusterQueue", on_delete=models.CASCADE, related_name="idle_policy")
    below_pct = models.FloatField(
        default=5.0,
        validators=[MinValueValidator(0.0)],
        help_text="Idle while every GPU sample of the job is under this utilization (%).",
    )
    minutes = models.PositiveIntegerField(
        default=60, validators=[MinValueValidator(1)], help_text="For this long, without a sample at or above it."
    )
    action = models.CharField(max_length=10, choices=Action.choices, default=Action.FLAG)
    enabled = models.BooleanField(default=True)

    class Meta:
        verbose_name_plural = "idle policies"

    def __str__(self) -> str:
        return f"{self.cluster_queue}: under {self.below_pct:g} % for {self.minutes} min → {self.action}"


class IdleFlag(models.Model):
    """One attempt of a job found idle under its queue's policy (once per attempt)."""

    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="idle_flags")
    attempt = models.PositiveIntegerField()
    flagged_at = models.DateTimeField()
    peak_util_pct = models.FloatField(help_text="The highest GPU utilization sample in the window.")
    below_pct = models.FloatField()
    minutes = models.PositiveIntegerField()
    stopped = models.BooleanField(default=False)

    class Meta:
        ordering = ["-flagged_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["job", "attempt"], name="uniq_idle_flag")]

    def __str__(self) -> str:
        return f"job {self.job_id} attempt {self.attempt}: idle ({self.peak_util_pct:g} % peak)"

    @property
    def message(self) -> str:
        return idle_message(peak_pct=self.peak_util_pct, below_pct=self.below_pct, minutes=self.minutes)


def idle_message(*, peak_pct: float, below_pct: float, minutes: int) -> str:
    return f"GPUs idle: at most {peak_pct:.1f} % utilization for {minutes} min (the queue's limit is {below_pct:g} %)"
