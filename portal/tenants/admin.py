from django.contrib import admin

from portal.tenants.models import Membership, Team, TeamHold


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "namespace", "created_at"]
    search_fields = ["name", "slug", "namespace"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "team", "role"]
    list_filter = ["role", "team"]
    search_fields = ["user__username", "team__name"]
    autocomplete_fields = ["user", "team"]


@admin.register(TeamHold)
class TeamHoldAdmin(admin.ModelAdmin):
    list_display = ["team", "source", "reason", "since"]
    list_filter = ["source"]
    readonly_fields = ["since"]
