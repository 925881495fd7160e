from django import forms
from django.contrib import admin

from scheduling.adapters.k8s.pods import valid_label
from scheduling.models import CycleRun, NodePool, SimNode


class NodePoolForm(forms.ModelForm):
    class Meta:
        model = NodePool
        fields = ["name", "node_selector", "placement", "overcommit_ratio", "order", "description"]

    def clean_node_selector(self):
        selector = self.cleaned_data["node_selector"]
        if not isinstance(selector, dict):
            raise forms.ValidationError('a JSON object of node labels, e.g. {"gpu.type": "a10g"}')
        for key, value in selector.items():
            if not isinstance(value, str) or not valid_label(str(key), value):
                raise forms.ValidationError(f"{key}={value!r} is not a Kubernetes label")
        if len(selector) > 16:
            raise forms.ValidationError("at most 16 labels")
        return selector


@admin.register(NodePool)
class NodePoolAdmin(admin.ModelAdmin):
    """KAI/Run:ai-style node pools: platform admins group nodes by labels and choose, per pool, the
    placement policy and how far fractional GPU requests may overcommit a device."""

    form = NodePoolForm
    list_display = ["name", "node_selector", "placement", "overcommit_ratio", "order"]
    ordering = ["order", "name"]


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
