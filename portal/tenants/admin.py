from django.contrib import admin

from portal.tenants.models import Membership, Team, TeamHold, TolerationGrant


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


class TolerationGrantInline(admin.TabularInline):
    """The taints the team may tolerate. Additions, changes and removals are recorded in the team's
    admin history (who, when, what)."""

    model = TolerationGrant
    extra = 0
    fields = ["all_taints", "key", "value", "effect", "note"]


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "namespace", "created_at"]
    search_fields = ["name", "slug", "namespace"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline, TolerationGrantInline]


@admin.register(TolerationGrant)
class TolerationGrantAdmin(admin.ModelAdmin):
    list_display = ["team", "all_taints", "key", "value", "effect", "note"]
    list_filter = ["team", "all_taints", "effect"]
    search_fields = ["team__slug", "key", "note"]


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
