from django.apps import AppConfig


class SchedulesConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "portal.schedules"
    label = "schedules"
    verbose_name = "Job schedules"
