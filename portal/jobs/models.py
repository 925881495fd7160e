"""Queues, quotas, priority classes and jobs.

Kueue's vocabulary: a ClusterQueue holds quota per GPU model (a resource flavor) and belongs to a
cohort it can borrow from; a team submits into a LocalQueue that points at a ClusterQueue.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from portal.jobs.states import ACTIVE_STATES, JobState
from portal.tenants.models import Team
from scheduling.engine.model import ReplicaPlacement as EnginePlacement
from scheduling.engine.shares import BILLED_UNITS_PER_GPU, billed_gpus, billed_units


class GpuModel(models.Model):
    name = models.CharField(max_length=64, unique=True, help_text="e.g. H100-80GB, A100-80GB, A10, T4")
    memory_gib = models.PositiveIntegerField(help_text="Memory per device, GiB.")
    mig_profiles = models.JSONField(
        default=list, blank=True, help_text='MIG profiles the model supports, e.g. ["1g.10gb", "3g.40gb"].'
    )

    class Meta:
        ordering = ["name"]
        verbose_name = "GPU model"

    def __str__(self) -> str:
        return self.name


class PriorityClass(models.Model):
    name = models.CharField(max_length=64, unique=True)
    value = models.IntegerField(help_text="Higher runs first and may preempt lower.")
    preemptible = models.BooleanField(default=True)
    min_runtime_s = models.PositiveIntegerField(
        default=0,
        validators=[MaxValueValidator(30 * 24 * 3600)],
        help_text="Seconds a job of this class runs before it may be preempted (KAI's preemption delay); 0 = none.",
    )
    description = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-value"]
        verbose_name_plural = "priority classes"

    def __str__(self) -> str:
        return f"{self.name} ({self.value})"


class ClusterQueue(models.Model):
    name = models.CharField(max_length=63, unique=True)
    cohort = models.CharField(max_length=63, blank=True, help_text="Queues in one cohort lend and borrow.")
    cpu_quota_milli = models.PositiveBigIntegerField(null=True, blank=True, help_text="Empty = unlimited.")
    memory_quota_mib = models.PositiveBigIntegerField(null=True, blank=True, help_text="Empty = unlimited.")
    weight = models.FloatField(default=1.0, validators=[MinValueValidator(0.0)], help_text="Fair-share weight.")

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class FlavorQuota(models.Model):
    """Quota of one GPU model in a ClusterQueue. Empty limits mean unlimited."""

    cluster_queue = models.ForeignKey(ClusterQueue, on_delete=models.CASCADE, related_name="flavors")
    gpu_model = models.ForeignKey(GpuModel, on_delete=models.PROTECT, related_name="+")
    nominal_gpus = models.PositiveIntegerField(default=0)
    borrowing_limit = models.PositiveIntegerField(null=True, blank=True)
    lending_limit = models.PositiveIntegerField(null=True, blank=True)
    order = models.PositiveSmallIntegerField(default=0, help_text="Models are tried in this order.")

    class Meta:
        ordering = ["cluster_queue", "order", "gpu_model__name"]
        constraints = [models.UniqueConstraint(fields=["cluster_queue", "gpu_model"], name="uniq_flavor")]

    def __str__(self) -> str:
        return f"{self.cluster_queue}: {self.gpu_model} ×{self.nominal_gpus}"


class QuotaChange(models.Model):
    """Audit trail of every quota edit: who, when, old → new. Append-only: the admin neither changes nor
    deletes a record, a ClusterQueue with records cannot be deleted (PROTECT), and on PostgreSQL a
    trigger refuses ``DELETE`` and ``UPDATE`` of the rows (migration 0008)."""

    cluster_queue = models.ForeignKey(ClusterQueue, on_delete=models.PROTECT, related_name="quota_changes")
    field = models.CharField(max_length=100, help_text="e.g. 'A100-80GB nominal_gpus' or 'cpu_quota_milli'.")
    old_value = models.CharField(max_length=100, blank=True)
    new_value = models.CharField(max_length=100, blank=True)
    changed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    changed_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-changed_at", "-id"]

    def __str__(self) -> str:
        return f"{self.cluster_queue} {self.field}: {self.old_value or '∅'} → {self.new_value or '∅'}"


class LocalQueue(models.Model):
    name = models.CharField(max_length=63)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="local_queues")
    cluster_queue = models.ForeignKey(ClusterQueue, on_delete=models.PROTECT, related_name="local_queues")
    weight = models.FloatField(default=1.0, validators=[MinValueValidator(0.0)])
    max_pending_jobs = models.PositiveIntegerField(null=True, blank=True, help_text="Empty = unlimited.")

    class Meta:
        ordering = ["team__name", "name"]
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="uniq_local_queue")]

    def __str__(self) -> str:
        return f"{self.team.slug}/{self.name}"


class Job(models.Model):
    class Kind(models.TextChoices):
        """What a job runs; each kind adds its own fields and pod set-up (docs/workloads.md).

        ``batch``: identical pods that run for a requested time. ``training``: a distributed
        training gang (PyTorch rendezvous environment, a headless Service, whole-gang restarts).
        ``ray``: a Ray cluster (head and workers) run as one gang (KubeRay on Kubernetes). Other
        kinds (inference services) add their values here."""

        BATCH = "batch"
        TRAINING = "training"
        INFERENCE = "inference"
        RAY = "ray"

    class RestartPolicy(models.TextChoices):
        REQUEUE = "requeue", "Requeue when preempted or evicted"
        NEVER = "never", "Fail when evicted"

    name = models.CharField(max_length=100, blank=True)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs")
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="jobs")
    local_queue = models.ForeignKey(LocalQueue, on_delete=models.PROTECT, related_name="jobs")
    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.BATCH)
    image = models.CharField(max_length=500)
    command = models.JSONField(default=list, blank=True, help_text="argv list")
    replicas = models.PositiveIntegerField(default=1, validators=[MinValueValidator(1), MaxValueValidator(1024)])
    min_available = models.PositiveIntegerField(default=0, help_text="Gang size; 0 = all replicas.")
    # Per-replica resources. At most one of gpu / gpu_milli / mig_profile / gpu_memory_gib.
    gpu = models.PositiveIntegerField(default=0, help_text="Whole GPUs per replica.")
    gpu_milli = models.PositiveIntegerField(default=0, help_text="Fraction of one GPU, in thousandths.")
    mig_profile = models.CharField(max_length=20, blank=True)
    gpu_memory_gib = models.PositiveIntegerField(default=0, help_text="GPU memory needed; becomes a GPU count.")
    cpu_milli = models.PositiveIntegerField(default=1000)
    memory_mib = models.PositiveIntegerField(default=4096)
    allowed_gpu_models = models.ManyToManyField(GpuModel, blank=True, related_name="+")
    priority_class = models.ForeignKey(PriorityClass, on_delete=models.PROTECT, related_name="jobs")
    runtime_s = models.PositiveIntegerField(default=3600, help_text="Requested runtime, seconds.")
    restart_policy = models.CharField(max_length=20, choices=RestartPolicy.choices, default=RestartPolicy.REQUEUE)
    node_selector = models.JSONField(default=dict, blank=True)
    tolerations = models.JSONField(default=list, blank=True)
    # Placement rules as a pod spec writes them (scheduling.adapters.k8s.affinity parses them).
    affinity = models.JSONField(
        default=dict, blank=True, help_text="nodeAffinity and podAntiAffinity (between the job's replicas)."
    )
    topology_spread_constraints = models.JSONField(
        default=list, blank=True, help_text="Spread of the job's replicas over a node label's domains."
    )
    required_topology = models.CharField(
        max_length=316, blank=True, help_text="All replicas in one node, rack, zone, nvlink domain or node label value."
    )
    labels = models.JSONField(default=dict, blank=True, help_text="Kubernetes-style labels, e.g. project, cost center.")
    checkpoint_path = models.CharField(
        max_length=1024,
        blank=True,
        help_text="Where the job writes checkpoints; passed to its pods as CHECKPOINT_PATH.",
    )
    max_restarts = models.PositiveIntegerField(
        default=3,
        validators=[MaxValueValidator(100)],
        help_text="Training: whole-gang restarts after a worker fails, then the job fails.",
    )
    spot = models.BooleanField(
        default=False, help_text="May run on spot nodes (tolerates their taint); requeued when reclaimed."
    )
    # Start windows (scheduling.engine.windows): admitted only while open; a running job is not stopped.
    start_after = models.DateTimeField(null=True, blank=True, help_text="Not admitted before this instant.")
    start_window = models.CharField(
        max_length=11, blank=True, help_text="Admitted only between these local times, e.g. 20:00-08:00."
    )
    window_timezone = models.CharField(max_length=64, default="UTC", help_text="IANA zone of start_window.")
    off_peak = models.BooleanField(
        default=False,
        help_text="Starts only in the off-peak hours (OFFPEAK_HOURS) and is billed at the off-peak price.",
    )
    ray = models.JSONField(
        default=dict,
        blank=True,
        help_text="Ray jobs: mode (job or cluster), entrypoint and worker_groups; the job's own resources "
        "are the head's (scheduling.adapters.k8s.ray).",
    )

    state = models.CharField(max_length=20, choices=JobState.choices, default=JobState.PENDING, db_index=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)
    admitted_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    attempt = models.PositiveIntegerField(default=0, help_text="Times admitted so far.")
    gpu_model = models.ForeignKey(
        GpuModel, null=True, blank=True, on_delete=models.PROTECT, related_name="+", help_text="Admitted on."
    )
    # The engine's explanation for a job that has not started (kind, message, numbers).
    capacity_type = models.CharField(max_length=20, blank=True, help_text="on-demand, spot or reserved")
    pending_reason = models.JSONField(default=dict, blank=True)
    queue_position = models.PositiveIntegerField(null=True, blank=True)
    estimated_start = models.DateTimeField(null=True, blank=True, help_text="P50 of the forecast.")
    estimated_start_p90 = models.DateTimeField(null=True, blank=True, help_text="P90 of the forecast.")
    message = models.CharField(max_length=500, blank=True, help_text="Last event in words.")
    # Admissions whose pods never ran (Kueue's waitForPodsReady): each one requeues the job after a
    # back-off doubling per failure, up to ADMITTED_REQUEUE_LIMIT requeues, then the job fails.
    start_failures = models.PositiveIntegerField(default=0, help_text="Admissions whose pods never ran.")
    restarts = models.PositiveIntegerField(default=0, help_text="Whole-gang restarts after a worker failed.")
    not_before = models.DateTimeField(null=True, blank=True, help_text="Back-off: not admitted again before this.")
    quota_held_s = models.FloatField(
        default=0.0, help_text="Seconds quota and devices were held by admissions whose pods never ran."
    )

    # PostgreSQL also keeps a column Django never writes, ``change_xid``: the id of the last transaction
    # that changed the row, its placements or its allowed GPU models (triggers of migration 0013), from
    # which the scheduler re-reads only the jobs changed since its last snapshot (scheduling.adapters.job_rows).

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["team", "state"]), models.Index(fields=["local_queue", "state"])]
        constraints = [
            models.CheckConstraint(condition=models.Q(gpu_milli__lt=1000), name="job_gpu_milli_is_a_fraction"),
        ]

    def __str__(self) -> str:
        return f"job {self.pk} {self.name}".strip()

    @property
    def holds_capacity(self) -> bool:
        return self.state in ACTIVE_STATES

    @staticmethod
    def kind_runs_until_stopped(kind: str) -> bool:
        """Whether a job of ``kind`` runs until it is stopped, with no expected end: an inference
        service's replica (its ``runtime_s`` is only the longest a job may ask for; the forecast, the
        cost estimate and the pages never read it as an end)."""
        return kind == Job.Kind.INFERENCE

    @property
    def runs_until_stopped(self) -> bool:
        return self.kind_runs_until_stopped(self.kind)

    @property
    def gang_size(self) -> int:
        return self.min_available or self.replicas

    def resume_hint(self) -> str:
        """What a requeued job's reason adds so its owner knows where to resume from ("" without a path)."""
        return f"; resume from checkpoint {self.checkpoint_path}" if self.checkpoint_path else ""

    @property
    def gpu_share_per_replica(self) -> float:
        """Billed GPUs one replica holds: 0.25 for 250 milli, 3/7 for a 3g MIG slice, n for n GPUs
        (0 for a GPU-memory request: its device count depends on the model it is admitted on)."""
        units = billed_units(gpus=self.gpu, gpu_milli=self.gpu_milli, mig_profile=self.mig_profile or None)
        return units / BILLED_UNITS_PER_GPU

    def resources_display(self) -> str:
        if self.gpu:
            gpu = f"{self.gpu} GPU"
        elif self.gpu_milli:
            gpu = f"{self.gpu_milli / 1000:g} GPU"
        elif self.mig_profile:
            gpu = f"MIG {self.mig_profile}"
        elif self.gpu_memory_gib:
            gpu = f"{self.gpu_memory_gib} GiB GPU memory"
        else:
            gpu = "no GPU"
        own = f"{self.replicas} × ({gpu}, {self.cpu_milli / 1000:g} CPU, {self.memory_mib} MiB)"
        if self.kind != self.Kind.RAY:
            return own
        groups = "".join(
            f" + {g.get('replicas', 1)} × ({g.get('gpu', 0)} GPU, {g.get('cpu_milli', 1000) / 1000:g} CPU, "
            f"{g.get('memory_mib', 4096)} MiB) {g.get('name', '')}"
            for g in (self.ray or {}).get("worker_groups") or ()
        )
        return f"head {own.removeprefix('1 × ')}{groups}"


class JobTransition(models.Model):
    """State history: one row per transition, timestamped."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="transitions")
    from_state = models.CharField(max_length=20, choices=JobState.choices, blank=True)
    to_state = models.CharField(max_length=20, choices=JobState.choices)
    at = models.DateTimeField(db_index=True)
    reason = models.CharField(max_length=500, blank=True)
    actor = models.CharField(max_length=100, blank=True, help_text="user name or 'scheduler' / 'cluster'")
    # On Admitted/Running: {"gpu_model", "gpus" (shares summed over replicas), "capacity_type", "nodes"}.
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.job_id}: {self.from_state or '∅'} → {self.to_state} at {self.at:%Y-%m-%d %H:%M:%S}"


class ReplicaPlacement(models.Model):
    """Where one replica of an admitted/running job runs. Replaced on every admission."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="placements")
    replica = models.PositiveIntegerField()
    node = models.CharField(max_length=253, db_index=True)
    gpu_indices = models.JSONField(default=list, blank=True)
    gpu_milli = models.PositiveIntegerField(default=0, help_text="Share held on each listed device.")
    mig_profile = models.CharField(max_length=20, blank=True)
    mig_slot = models.PositiveSmallIntegerField(null=True, blank=True)
    cpu_milli = models.PositiveIntegerField(default=0)
    memory_mib = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["job", "replica"]
        constraints = [models.UniqueConstraint(fields=["job", "replica"], name="uniq_replica")]

    def __str__(self) -> str:
        return f"job {self.job_id} replica {self.replica} on {self.node} {self.gpu_indices}"

    @classmethod
    def from_engine(cls, *, job: Job, replica: int, placement: EnginePlacement) -> ReplicaPlacement:
        """The row of an engine placement (the inverse of :meth:`engine_placement`)."""
        return cls(
            job=job,
            replica=replica,
            node=placement.node,
            gpu_indices=list(placement.gpu_indices),
            gpu_milli=placement.gpu_milli,
            mig_profile=placement.mig_profile or "",
            mig_slot=placement.mig_slot,
            cpu_milli=placement.cpu_milli,
            memory_mib=placement.memory_mib,
        )

    def engine_placement(self) -> EnginePlacement:
        """This row as the engine's value (the shares and the engine are defined on it)."""
        values = (self.gpu_indices, self.gpu_milli, self.mig_profile, self.mig_slot, self.cpu_milli, self.memory_mib)
        return self.engine_placement_of(self.node, *values)

    @staticmethod
    def engine_placement_of(
        node: str,
        gpu_indices: list[int],
        gpu_milli: int,
        mig_profile: str,
        mig_slot: int | None,
        cpu_milli: int,
        memory_mib: int,
    ) -> EnginePlacement:
        """The engine's value of a row read as plain values (in this order), without a model instance."""
        return EnginePlacement(
            node=node,
            gpu_indices=tuple(gpu_indices),
            gpu_milli=gpu_milli,
            mig_profile=mig_profile or None,
            mig_slot=mig_slot,
            cpu_milli=cpu_milli,
            memory_mib=memory_mib,
        )


class JobAttempt(models.Model):
    """One admission of a job and what became of it: where it ran, when, and how it ended.

    Written with the transition that opens or closes it (``portal.jobs.transitions``), in the same
    transaction, so the history survives the job leaving the cluster: ``ReplicaPlacement`` holds only
    the live placement and is emptied when the job stops; an attempt keeps its copy. ``queued_at`` is
    when this attempt's wait began (submission for the first one, the requeue for later ones);
    ``started_at`` and ``ended_at`` are the cluster's own times, as in the state history, so an
    attempt's run is exactly the Running interval metering bills.
    """

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveIntegerField(help_text="1 for the first admission, then 2, 3, ...")
    queued_at = models.DateTimeField(help_text="When the wait for this admission began.")
    admitted_at = models.DateTimeField(db_index=True)  # wait percentiles per window (the Queues page)
    started_at = models.DateTimeField(null=True, blank=True, help_text="Pods running (cluster time).")
    ended_at = models.DateTimeField(null=True, blank=True, db_index=True)
    outcome = models.CharField(
        max_length=20, choices=JobState.choices, blank=True, help_text="The state the job left this attempt for."
    )
    requeued = models.BooleanField(default=False, help_text="The job went back to the queue after this attempt.")
    end_reason = models.CharField(max_length=500, blank=True)
    gpu_model = models.CharField(max_length=64, blank=True)
    capacity_type = models.CharField(max_length=20, blank=True)
    borrowed = models.BooleanField(default=False)
    replicas = models.PositiveIntegerField(default=0)
    # Billed share held, all replicas together, in 1/7000 GPU (scheduling.engine.shares): GPU usage
    # is this times the running time, exactly as metering counts it.
    gpu_share_7000ths = models.PositiveBigIntegerField(default=0)
    cpu_milli = models.PositiveBigIntegerField(default=0, help_text="All replicas together.")
    memory_mib = models.PositiveBigIntegerField(default=0, help_text="All replicas together.")
    nodes = models.JSONField(default=list, blank=True, help_text="Nodes the replicas ran on, sorted.")
    placements = models.JSONField(
        default=list, blank=True, help_text="Per replica: node, GPU devices, share, MIG slice, CPU, memory."
    )

    class Meta:
        ordering = ["job", "number"]
        constraints = [models.UniqueConstraint(fields=["job", "number"], name="uniq_job_attempt")]

    def __str__(self) -> str:
        return f"job {self.job_id} attempt {self.number}"

    @property
    def gpus(self) -> Decimal:
        """Billed GPUs held (3/7 of a GPU for a 3g slice, to 6 decimals)."""
        return billed_gpus(self.gpu_share_7000ths)

    def run_s(self, now: datetime) -> float:
        """Seconds its pods ran (up to ``now`` while they still run); 0 if they never started."""
        if self.started_at is None:
            return 0.0
        return max(0.0, ((self.ended_at or now) - self.started_at).total_seconds())

    def waited_s(self) -> float:
        """Seconds from the start of its wait to admission."""
        return max(0.0, (self.admitted_at - self.queued_at).total_seconds())


class IdempotencyKey(models.Model):
    """An ``Idempotency-Key`` a user sent with a submission, and the answer it got.

    The same user, key and body within ``IDEMPOTENCY_TTL_S`` get that answer again (the first job,
    never a second one); the same key with another body is refused."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64, help_text="SHA-256 of the request body, canonical JSON.")
    job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    response = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "key"], name="uniq_idempotency_key")]

    def __str__(self) -> str:
        return f"{self.user_id}: {self.key}"
