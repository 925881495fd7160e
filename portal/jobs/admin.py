"""Django admin for queues, quotas, priority classes and jobs. Quota edits are recorded (who, when, old → new)."""

from __future__ import annotations

from django.contrib import admin

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
from portal.jobs.services import quota_changes_record, quota_state


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

    def get_form(self, request, obj=None, change=False, **kwargs):
        if request.method == "POST":
            request._quota_before = quota_state(obj) if obj is not None else {}
        return super().get_form(request, obj, change=change, **kwargs)


@admin.register(QuotaChange)
class QuotaChangeAdmin(admin.ModelAdmin):
    list_display = ["changed_at", "cluster_queue", "field", "old_value", "new_value", "changed_by"]
    list_filter = ["cluster_queue", "changed_by"]
    search_fields = ["cluster_queue__name", "field"]
    readonly_fields = ["changed_at", "cluster_queue", "field", "old_value", "new_value", "changed_by"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


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
        "created_at",
    ]
    list_filter = ["state", "kind", "team", "priority_class", "gpu_model"]
    search_fields = ["id", "name", "image", "owner__username", "team__name"]
    date_hierarchy = "created_at"
    readonly_fields = [
        "state", "created_at", "updated_at", "admitted_at", "started_at", "finished_at", "attempt",
        "gpu_model", "capacity_type", "pending_reason", "queue_position", "estimated_start", "message",
    ]  # fmt: skip
    inlines = [PlacementInline, TransitionInline]
