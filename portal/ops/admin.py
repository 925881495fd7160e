"""The audit trail in the admin: read-only, nothing added, changed or deleted."""

from __future__ import annotations

from django.contrib import admin
from django.utils import timezone

from portal.ops.models import AuditEntry


def with_zone(value) -> str:
    """A time as the admin shows it: local time with its zone (``2026-11-24 23:40:05 UTC``)."""
    return "" if value is None else timezone.localtime(value).strftime("%Y-%m-%d %H:%M:%S %Z")


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    """The audit trail of admin actions on jobs, prices and quotas: read-only, nothing deleted."""

    list_display = ["when", "actor_name", "action", "target", "field", "old_value", "new_value"]
    list_filter = ["action", "target_type"]
    search_fields = ["target", "actor_name", "target_id"]
    readonly_fields = [f.name for f in AuditEntry._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(description="at", ordering="at")
    def when(self, obj):
        return with_zone(obj.at)
