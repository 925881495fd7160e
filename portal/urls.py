from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from portal.api.docs import ApiDocsPermission
from portal.notifications import views as notifications
from portal.pages import ops
from portal.pages import views as pages
from portal.schedules import views as schedule_views
from portal.serving import views as serving_views
from portal.tokens import views as tokens
from portal.whatif import views as whatif

handler500 = "portal.middleware.server_error"
docs = {"permission_classes": [ApiDocsPermission]}

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", pages.home, name="home"),
    path("jobs/", pages.job_list, name="job-list"),
    path("jobs/new/", pages.job_create, name="job-create"),
    path("jobs/new/mig-profiles/", pages.job_mig_profiles, name="job-mig-profiles"),
    path("jobs/new/check/", pages.job_check, name="job-check"),
    path("jobs/<int:pk>/", pages.job_detail, name="job-detail"),
    path("jobs/<int:pk>/cancel/", pages.job_cancel, name="job-cancel"),
    path("queues/", ops.queue_list, name="queue-list"),
    path("queues/fair-share/", ops.fair_share_formula, name="fair-share-formula"),
    path("queues/charts/", ops.queue_charts, name="queue-charts"),
    path("cluster/", ops.cluster, name="cluster"),
    path("cluster/nodes/<str:name>/", ops.cluster_node, name="cluster-node"),
    path("dashboard/", pages.dashboard, name="dashboard"),
    path("schedules/", schedule_views.schedule_list_page, name="schedule-list"),
    path("services/", serving_views.service_list_page, name="service-list"),
    path("services/<int:pk>/", serving_views.service_detail_page, name="service-detail"),
    path("services/<int:pk>/stop/", serving_views.service_stop_page, name="service-stop"),
    path("whatif/", whatif.whatif_index, name="whatif"),
    path("whatif/<int:pk>/", whatif.whatif_run, name="whatif-run"),
    path("healthz", pages.healthz, name="healthz"),
    path("api/v1/", include("portal.api.urls")),
    path("account/tokens/", tokens.token_list, name="token-list"),
    path("account/notifications/", notifications.notification_settings, name="notification-settings"),
    path("jobs/<int:pk>/notifications/", notifications.job_notifications, name="job-notifications"),
    path("account/tokens/<int:pk>/revoke/", tokens.token_revoke, name="token-revoke"),
    path("api/schema/", SpectacularAPIView.as_view(**docs), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema", **docs), name="swagger-ui"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="schema", **docs), name="redoc"),
    path("", include("scheduling.urls")),
    path("", include("billing.urls")),
]
