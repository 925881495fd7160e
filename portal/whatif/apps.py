from django.apps import AppConfig


class WhatIfConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "portal.whatif"
    label = "whatif"
    verbose_name = "What-if"
