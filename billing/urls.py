"""Cost pages and the cost API. Included at the site root, so the API paths are spelled out in full."""

from django.urls import path

from billing import views
from billing.api.views import BudgetListView, CostAllocationView

app_name = "billing"
urlpatterns = [
    path("cost/", views.cost_dashboard, name="cost-dashboard"),
    path("cost/breakdown/", views.cost_breakdown, name="cost-breakdown"),
    path("cost/recommendations/", views.cost_recommendations, name="cost-recommendations"),
    path("cost/invoice/<slug:slug>/<int:year>-<int:month>/", views.invoice, name="invoice"),
    path("cost/invoice/<slug:slug>/<int:year>-<int:month>.csv", views.invoice_csv, name="invoice-csv"),
    path("api/v1/cost/allocation", CostAllocationView.as_view(), name="api-cost-allocation"),
    path(
        "api/v1/cost/allocation.csv",
        CostAllocationView.as_view(),
        {"format": "csv"},
        name="api-cost-allocation-csv",
    ),
    path("api/v1/cost/budgets", BudgetListView.as_view(), name="api-cost-budgets"),
]
