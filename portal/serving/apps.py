from django.apps import AppConfig


class ServingConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "portal.serving"
    label = "serving"
    verbose_name = "Inference services"
