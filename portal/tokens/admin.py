"""Platform admins see every API token (never a key: only hashes are stored) and may revoke them."""

from django.contrib import admin
from django.utils import timezone

from portal.tokens.models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "user", "prefix", "created_at", "expires_at", "last_used_at", "revoked_at"]
    list_filter = ["revoked_at"]
    search_fields = ["name", "user__username", "prefix"]
    readonly_fields = ["user", "prefix", "key_hash", "created_at", "last_used_at", "revoked_at"]
    actions = ["revoke"]

    def has_add_permission(self, request):
        return False  # a key must be shown to its owner once: users create tokens on their tokens page

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request, queryset):
        queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())


# The old plain-text tokens are migrated into hashed ones (migration 0002); their admin page goes.
from rest_framework.authtoken.models import TokenProxy  # noqa: E402

if admin.site.is_registered(TokenProxy):
    admin.site.unregister(TokenProxy)
