from django.contrib import admin

from portal.whatif.models import WhatIfRun


@admin.register(WhatIfRun)
class WhatIfRunAdmin(admin.ModelAdmin):
    list_display = ("pk", "created_by", "created_at", "window_from", "window_to", "status", "progress")
    list_filter = ("status",)
    readonly_fields = ("result",)
