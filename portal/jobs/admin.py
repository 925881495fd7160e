"""Django admin for queues, quotas, priority classes and jobs. Quota edits are recorded (who, when, old → new)."""

from __future__ import annotations

from django.contrib import admin, messages

from portal.jobs.models import (
    ClusterQueue,
    FlavorQuota,
    GpuModel,
    Job,
    JobTransition,
    LocalQueue,
    PriorityClass,
    QuotaChange,
    ReplicaPlacement,
)
from portal.jobs.services import (
    job_admin_cancel,
    job_priority_update,
    job_requeue,
    jobs_bulk_apply,
    quota_changes_record,
    quota_state,
)
from portal.ops.admin import with_zone
from portal.ops.models import AuditEntry
from portal.ops.selectors import queue_standings_now, quota_warnings
from portal.ops.selectors.governance import below_use_warnings
from portal.ops.services import audit_record


def warn(request, lines: list[str]) -> None:
    for line in lines:
        messages.warning(request, line)


@admin.register(GpuModel)
class GpuModelAdmin(admin.ModelAdmin):
    list_display = ["name", "memory_gib", "mig_profiles"]
    search_fields = ["name"]


@admin.register(PriorityClass)
class PriorityClassAdmin(admin.ModelAdmin):
    list_display = ["name", "value", "preemptible", "min_runtime_s", "description"]
    list_filter = ["preemptible"]
    search_fields = ["name"]


class FlavorQuotaInline(admin.TabularInline):
    model = FlavorQuota
    extra = 0


class QuotaChangeInline(admin.TabularInline):
    model = QuotaChange
    extra = 0
    can_delete = False
    readonly_fields = ("changed_at", "changed_by", "field", "old_value", "new_value")
    fields = readonly_fields
    ordering = ["-changed_at"]

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(ClusterQueue)
class ClusterQueueAdmin(admin.ModelAdmin):
    list_display = ["name", "cohort", "cpu_quota_milli", "memory_quota_mib", "weight"]
    list_filter = ["cohort"]
    search_fields = ["name", "cohort"]
    inlines = [FlavorQuotaInline, QuotaChangeInline]

    def save_related(self, request, form, formsets, change):
        # The flavors are saved with the inlines, so the "before" picture is taken when the form is
        # first bound (in get_form) and compared after everything has been saved.
        super().save_related(request, form, formsets, change)
        before = getattr(request, "_quota_before", {})
        quota_changes_record(
            by=request.user, before=before, after=quota_state(form.instance), cluster_queue=form.instance
        )
        standings = queue_standings_now()
        warn(request, below_use_warnings(standings, cluster_queue=form.instance.name) + quota_warnings(standings))

    def changelist_view(self, request, extra_context=None):
        if request.method == "GET":
            warn(request, quota_warnings(queue_standings_now()))
        return super().changelist_view(request, extra_context)

    def get_form(self, request, obj=None, change=False, **kwargs):
        if request.method == "POST":
            request._quota_before = quota_state(obj) if obj is not None else {}
        return super().get_form(request, obj, change=change, **kwargs)


@admin.register(QuotaChange)
class QuotaChangeAdmin(admin.ModelAdmin):
    """Append-only: no add, change or delete here (nor on PostgreSQL at all, see the model)."""

    list_display = ["when", "cluster_queue", "field", "old_value", "new_value", "changed_by"]
    list_filter = ["cluster_queue", "changed_by"]
    search_fields = ["cluster_queue__name", "field"]
    readonly_fields = ["changed_at", "cluster_queue", "field", "old_value", "new_value", "changed_by"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(description="changed at", ordering="changed_at")
    def when(self, obj):
        return with_zone(obj.changed_at)


@admin.register(LocalQueue)
class LocalQueueAdmin(admin.ModelAdmin):
    list_display = ["name", "team", "cluster_queue", "weight", "max_pending_jobs"]
    list_filter = ["team", "cluster_queue"]
    search_fields = ["name", "team__name"]


class TransitionInline(admin.TabularInline):
    model = JobTransition
    extra = 0
    can_delete = False
    readonly_fields = ["at", "from_state", "to_state", "reason", "actor", "detail"]

    def has_add_permission(self, request, obj=None):
        return False


class PlacementInline(admin.TabularInline):
    model = ReplicaPlacement
    extra = 0
    can_delete = False
    readonly_fields = [
        "replica",
        "node",
        "gpu_indices",
        "gpu_milli",
        "mig_profile",
        "mig_slot",
        "cpu_milli",
        "memory_mib",
    ]

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "name",
        "team",
        "local_queue",
        "state",
        "kind",
        "gpu_model",
        "priority_class",
        "created",
    ]
    list_filter = ["state", "kind", "team", "priority_class", "gpu_model"]
    search_fields = ["id", "name", "image", "owner__username", "team__name"]
    date_hierarchy = "created_at"
    readonly_fields = [
        "state", "created_at", "updated_at", "admitted_at", "started_at", "finished_at", "attempt",
        "gpu_model", "capacity_type", "pending_reason", "queue_position", "estimated_start", "message",
    ]  # fmt: skip
    inlines = [PlacementInline, TransitionInline]
    actions = ["cancel_jobs", "requeue_jobs"]

    @admin.display(description="created at", ordering="created_at")
    def created(self, obj):
        return with_zone(obj.created_at)

    def get_actions(self, request):
        """The bulk actions, plus one "set priority" per priority class (no intermediate page)."""
        actions = super().get_actions(request)
        for pc in PriorityClass.objects.all():
            name = f"priority_{pc.pk}"
            actions[name] = (_priority_action(pc), name, f"Set priority of selected jobs to {pc}")
        return actions

    @admin.action(description="Cancel selected jobs")
    def cancel_jobs(self, request, queryset):
        self._report(request, "cancelled", jobs_bulk_apply(
            jobs=queryset, by=request.user, action=lambda job: job_admin_cancel(job=job, by=request.user)
        ))  # fmt: skip

    @admin.action(description="Requeue selected jobs (stop them and put them back in their queue)")
    def requeue_jobs(self, request, queryset):
        self._report(request, "requeued", jobs_bulk_apply(
            jobs=queryset, by=request.user, action=lambda job: job_requeue(job=job, by=request.user)
        ))  # fmt: skip

    @staticmethod
    def _report(request, verb: str, result) -> None:
        if result.done:
            messages.success(request, f"{len(result.done)} job(s) {verb}: {', '.join(map(str, result.done))}.")
        for job_id, why in result.refused:
            messages.warning(request, f"job {job_id}: {why}")

    def delete_model(self, request, obj):
        audit_record(by=request.user, action=AuditEntry.Action.JOB_DELETE, target_type="job", target_id=obj.pk,
                     target=str(obj), field="state", old=obj.state)  # fmt: skip
        super().delete_model(request, obj)

    def delete_queryset(self, request, queryset):
        for job in queryset:
            audit_record(by=request.user, action=AuditEntry.Action.JOB_DELETE, target_type="job", target_id=job.pk,
                         target=str(job), field="state", old=job.state)  # fmt: skip
        super().delete_queryset(request, queryset)

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        if change:
            for name in form.changed_data:
                audit_record(by=request.user, action=AuditEntry.Action.JOB_CHANGE, target_type="job",
                             target_id=obj.pk, target=str(obj), field=name, old=form.initial.get(name),
                             new=form.cleaned_data.get(name))  # fmt: skip


def _priority_action(pc: PriorityClass):
    def set_priority(modeladmin, request, queryset):
        JobAdmin._report(request, f"moved to priority {pc.name}", jobs_bulk_apply(
            jobs=queryset, by=request.user,
            action=lambda job: job_priority_update(job=job, by=request.user, priority_class=pc),
        ))  # fmt: skip

    return set_priority
