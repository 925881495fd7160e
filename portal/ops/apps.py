from django.apps import AppConfig


class OpsConfig(AppConfig):
    name = "portal.ops"
    label = "ops"
    verbose_name = "Operations: cluster, queues and audit"
