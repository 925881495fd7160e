from django.contrib import admin
from django.utils import timezone

from billing.models import Budget, BudgetAlert, CapacitySnapshot, IdleFlag, IdlePolicy, PriceBookEntry, UsageRecord
from portal.ops.models import AuditEntry
from portal.ops.services import audit_record

PRICE_FIELDS = ("resource", "gpu_model", "capacity_type", "usd_per_hour", "effective_from", "note")


@admin.register(PriceBookEntry)
class PriceBookEntryAdmin(admin.ModelAdmin):
    """Prices are effective-dated: to change a price, add an entry with a later ``effective_from``.

    An entry already in force is read-only and cannot be deleted, so no edit rewrites costs already
    reported; a future entry may still be corrected or withdrawn.
    """

    list_display = ("resource", "gpu_model", "capacity_type", "usd_per_hour", "effective_from", "note")
    list_filter = ("resource", "capacity_type", "gpu_model")
    ordering = ("resource", "gpu_model", "capacity_type", "-effective_from")

    def get_readonly_fields(self, request, obj=None):
        if obj is not None and obj.effective_from <= timezone.now():
            return ("resource", "gpu_model", "capacity_type", "effective_from", "usd_per_hour", "created_at")
        return ("created_at",)

    def has_delete_permission(self, request, obj=None):
        if obj is not None and obj.effective_from <= timezone.now():
            return False
        return super().has_delete_permission(request, obj)

    # Every price added, corrected or withdrawn goes into the audit trail with the job actions.
    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        if not change:
            audit_record(by=request.user, action=AuditEntry.Action.PRICE_ADD, target_type="price", target_id=obj.pk,
                         target=str(obj), field="usd_per_hour", new=obj.usd_per_hour)  # fmt: skip
            return
        for name in form.changed_data:
            if name in PRICE_FIELDS:
                audit_record(by=request.user, action=AuditEntry.Action.PRICE_CHANGE, target_type="price",
                             target_id=obj.pk, target=str(obj), field=name, old=form.initial.get(name),
                             new=form.cleaned_data.get(name))  # fmt: skip

    def delete_model(self, request, obj):
        self._record_deletion(request, obj)
        super().delete_model(request, obj)

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            self._record_deletion(request, obj)
        super().delete_queryset(request, queryset)

    @staticmethod
    def _record_deletion(request, obj) -> None:
        audit_record(by=request.user, action=AuditEntry.Action.PRICE_DELETE, target_type="price", target_id=obj.pk,
                     target=str(obj), field="usd_per_hour", old=obj.usd_per_hour)  # fmt: skip


@admin.register(Budget)
class BudgetAdmin(admin.ModelAdmin):
    list_display = ("team", "monthly_gpu_usd", "hard_stop", "alert_emails", "updated_at")
    list_filter = ("hard_stop",)


@admin.register(BudgetAlert)
class BudgetAlertAdmin(admin.ModelAdmin):
    list_display = ("team", "month", "threshold_pct", "spend_usd", "budget_usd", "created_at", "emailed_to")
    list_filter = ("threshold_pct", "month")
    readonly_fields = ("team", "month", "threshold_pct", "spend_usd", "budget_usd", "created_at", "emailed_to")


@admin.register(CapacitySnapshot)
class CapacitySnapshotAdmin(admin.ModelAdmin):
    list_display = ("at", "gpu_model", "capacity_type", "gpu_count", "node_count")
    list_filter = ("gpu_model", "capacity_type")


@admin.register(UsageRecord)
class UsageRecordAdmin(admin.ModelAdmin):
    list_display = ("job", "namespace", "gpu_model", "capacity_type", "start", "end", "gpus", "gpu_seconds")
    list_filter = ("gpu_model", "capacity_type", "namespace")
    raw_id_fields = ("job", "team")

    def has_change_permission(self, request, obj=None):
        return False  # usage is metered, never edited


@admin.register(IdlePolicy)
class IdlePolicyAdmin(admin.ModelAdmin):
    list_display = ("cluster_queue", "below_pct", "minutes", "action", "enabled")
    list_editable = ("below_pct", "minutes", "action", "enabled")


@admin.register(IdleFlag)
class IdleFlagAdmin(admin.ModelAdmin):
    """Flags are the check's record: read only."""

    list_display = ("job", "attempt", "flagged_at", "peak_util_pct", "below_pct", "minutes", "stopped")
    list_filter = ("stopped",)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
