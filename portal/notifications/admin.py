from django.contrib import admin

from portal.notifications.models import Notification, NotificationPreference, WebhookEndpoint


@admin.register(Notification)
class NotificationAdmin(admin.ModelAdmin):
    list_display = ["occurred_at", "job", "attempt", "event", "channel", "user", "status", "tries", "last_error"]
    list_filter = ["status", "event", "channel"]
    search_fields = ["job__id", "user__username", "last_error"]
    readonly_fields = [f.name for f in Notification._meta.fields]


@admin.register(NotificationPreference)
class NotificationPreferenceAdmin(admin.ModelAdmin):
    list_display = ["user", "job", "email", "webhook", "on_succeeded", "on_failed", "on_preempted"]
    search_fields = ["user__username"]


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(admin.ModelAdmin):
    """The secret is never shown (not even to admins): only its first characters."""

    list_display = ["user", "url", "secret_prefix", "created_at"]
    fields = ["user", "url", "secret_prefix", "created_at"]
    readonly_fields = ["secret_prefix", "created_at"]
    search_fields = ["user__username", "url"]
