"""Cost API views: read the query string, call a selector, render.

Query parameters of the allocation endpoint (all optional):
``window`` (7d, 24h, today, week, month, lastmonth, or ``start,end``), ``aggregate`` (namespace, team,
queue, cluster_queue, job, gpu_model, capacity_type, label:<key>), ``step`` (1h, 6h, 1d...; none = one
step), ``idle`` (show ``__idle__``, platform admins only), ``shareIdle`` (spread idle cost over groups
in proportion to their GPU usage), ``format=csv`` (or ``Accept: text/csv``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import renderers, serializers
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from billing.api.params import WindowError, parse_aggregate, parse_bool, parse_step_hours, parse_window
from billing.api.render import CSVRenderer, allocation_csv, allocation_filename, allocation_json
from billing.selectors import AllocationQuery, budget_status_list, cost_allocation
from portal.tenants.selectors import team_list_for_user


def allocation_query_from_params(params: Mapping[str, str], *, user: Any, now: datetime) -> AllocationQuery:
    """Read and check the query string; ``WindowError`` says what is wrong."""
    window = parse_window(params.get("window", "7d"), now)
    aggregate = parse_aggregate(params.get("aggregate"))
    step_hours = parse_step_hours(params.get("step"), window)
    team_ids = None if user.is_staff else frozenset(team_list_for_user(user=user).values_list("pk", flat=True))
    return AllocationQuery(
        start=window[0],
        end=window[1],
        step_hours=step_hours,
        aggregate=aggregate,
        show_idle=parse_bool(params.get("idle"), True),
        share_idle=parse_bool(params.get("shareIdle"), False),
        team_ids=team_ids,
    )


ALLOCATION_PARAMETERS = [
    OpenApiParameter("window", OpenApiTypes.STR, description="7d, 24h, today, week, month, lastmonth, start,end"),
    OpenApiParameter(
        "aggregate",
        OpenApiTypes.STR,
        description="namespace, team, queue, cluster_queue, job, gpu_model, capacity_type or label:<key>",
    ),
    OpenApiParameter("step", OpenApiTypes.STR, description="1h, 6h, 1d, ...; none = the whole window"),
    OpenApiParameter("idle", OpenApiTypes.BOOL, description="show idle GPU cost as __idle__ (admins)"),
    OpenApiParameter("shareIdle", OpenApiTypes.BOOL, description="share idle cost in proportion to usage"),
]


class CostAllocationView(APIView):
    """Cost per group and step: GPU-hours, GPU/CPU/RAM cost, shared idle, total and GPU efficiency.

    Tenants see their own teams only; platform admins see every team and the ``__idle__`` group.
    Step figures are rounded to 6 decimals; ``totals`` are exact over the window.
    """

    renderer_classes = [renderers.JSONRenderer, renderers.BrowsableAPIRenderer, CSVRenderer]

    @extend_schema(parameters=ALLOCATION_PARAMETERS, responses={200: OpenApiTypes.OBJECT})
    def get(self, request: Request, format: str | None = None) -> Response:
        try:
            query = allocation_query_from_params(request.query_params, user=request.user, now=timezone.now())
        except WindowError as exc:
            raise ValidationError({"detail": str(exc)}) from exc
        allocation = cost_allocation(query)
        if getattr(request.accepted_renderer, "format", "") == "csv":
            response = Response(allocation_csv(allocation))
            response["Content-Disposition"] = f'attachment; filename="{allocation_filename(allocation)}"'
            return response
        return Response(allocation_json(allocation))


class BudgetStatusSerializer(serializers.Serializer):
    team = serializers.CharField(source="team.slug")
    monthly_gpu_usd = serializers.DecimalField(source="budget_usd", max_digits=14, decimal_places=2)
    spend_usd = serializers.DecimalField(max_digits=14, decimal_places=2)
    used_pct = serializers.FloatField()
    hard_stop = serializers.BooleanField()
    blocked = serializers.BooleanField()


class BudgetListView(APIView):
    """This month's GPU spend against each visible team's budget."""

    @extend_schema(responses={200: BudgetStatusSerializer(many=True)})
    def get(self, request: Request) -> Response:
        statuses = budget_status_list(teams=team_list_for_user(user=request.user), now=timezone.now())
        return Response({"results": BudgetStatusSerializer(statuses, many=True).data})
