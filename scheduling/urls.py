from django.urls import path

from scheduling.metrics import metrics_view

app_name = "scheduling"
urlpatterns = [
    path("metrics", metrics_view, name="metrics"),
]
