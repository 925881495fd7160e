from django.urls import path
from rest_framework.routers import DefaultRouter

from portal.api import views
from portal.schedules.api import ScheduleViewSet
from portal.serving.api import ServiceViewSet
from scheduling.api import NamespaceObjectListView

app_name = "api"
router = DefaultRouter()
router.register("jobs", views.JobViewSet, basename="job")
router.register("teams", views.TeamViewSet, basename="team")
router.register("queues", views.LocalQueueViewSet, basename="queue")
router.register("gpu-models", views.GpuModelViewSet, basename="gpu-model")
router.register("schedules", ScheduleViewSet, basename="schedule")
router.register("services", ServiceViewSet, basename="service")
router.register("priority-classes", views.PriorityClassViewSet, basename="priority-class")

urlpatterns = [
    path("namespaces/", NamespaceObjectListView.as_view(), name="namespace-object-list"),
    path("capacity/", views.CapacityWantedView.as_view(), name="capacity-wanted"),
    path("cluster/", views.ClusterView.as_view(), name="cluster"),
    path("fairness/", views.FairnessView.as_view(), name="fairness"),
    path("cluster-queues/", views.ClusterQueueListView.as_view(), name="cluster-queue-list"),
    path("cluster-queues/<str:name>/", views.ClusterQueueDetailView.as_view(), name="cluster-queue-detail"),
    *router.urls,
]
