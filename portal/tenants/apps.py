from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "portal.tenants"
    label = "tenants"
    verbose_name = "Teams"
