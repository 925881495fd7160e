from django.contrib import admin

from scheduling.models import CycleRun, SimNode


@admin.register(SimNode)
class SimNodeAdmin(admin.ModelAdmin):
    list_display = ["name", "gpu_model", "gpu_count", "cpu_milli", "memory_mib", "unschedulable", "mig_enabled"]
    list_filter = ["gpu_model", "unschedulable", "mig_enabled"]
    search_fields = ["name"]


@admin.register(CycleRun)
class CycleRunAdmin(admin.ModelAdmin):
    list_display = ["started_at", "duration_ms", "pending", "admitted", "preempted", "allocated_gpus", "total_gpus"]
    date_hierarchy = "started_at"

    def has_add_permission(self, request):
        return False
