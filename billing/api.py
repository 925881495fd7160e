"""REST API for cost: ``/api/v1/cost/allocation`` in the shape OpenCost users know, and budgets.

Query parameters of the allocation endpoint (all optional):
``window`` (7d, 24h, today, week, month, lastmonth, or ``start,end``), ``aggregate`` (namespace, team,
queue, cluster_queue, job, gpu_model, capacity_type, label:<key>), ``step`` (1h, 6h, 1d...; none = one
step), ``idle`` (show ``__idle__``, platform admins only), ``shareIdle`` (spread idle cost over groups
in proportion to their GPU usage), ``format=csv`` (or ``Accept: text/csv``).
"""

from __future__ import annotations

import csv
import io
from datetime import datetime

from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import renderers, serializers
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from billing import pricing
from billing.selectors import AllocationQuery, budget_status_list, cost_allocation
from portal.tenants.selectors import team_list_for_user

CSV_COLUMNS = [
    "window_start",
    "window_end",
    "name",
    "gpu_hours",
    "gpu_cost",
    "cpu_core_hours",
    "cpu_cost",
    "ram_gib_hours",
    "ram_cost",
    "shared_idle_cost",
    "total_cost",
    "gpu_efficiency",
]


class CSVRenderer(renderers.BaseRenderer):
    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        out = io.StringIO()
        if isinstance(data, dict) and "rows" in data:
            writer = csv.writer(out)
            writer.writerow(data.get("columns", CSV_COLUMNS))
            writer.writerows(data["rows"])
        else:  # an error body
            writer = csv.writer(out)
            writer.writerow(["detail"])
            writer.writerow([data.get("detail", "") if isinstance(data, dict) else str(data)])
        return out.getvalue().encode("utf-8")


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _number(value):
    return float(value) if value is not None else None


def allocation_query_from_params(params, *, user, now: datetime) -> AllocationQuery:
    """Read and check the query string; ``WindowError`` says what is wrong."""
    window = pricing.parse_window(params.get("window", "7d"), now)
    aggregate = pricing.parse_aggregate(params.get("aggregate"))
    step_hours = pricing.parse_step_hours(params.get("step"), window)
    team_ids = None if user.is_staff else frozenset(team_list_for_user(user=user).values_list("pk", flat=True))
    return AllocationQuery(
        start=window[0],
        end=window[1],
        step_hours=step_hours,
        aggregate=aggregate,
        show_idle=pricing.parse_bool(params.get("idle"), True),
        share_idle=pricing.parse_bool(params.get("shareIdle"), False),
        team_ids=team_ids,
    )


def allocation_json(allocation: pricing.Allocation) -> dict:
    data = []
    for start, end, groups in allocation.steps:
        window = {"start": _iso(start), "end": _iso(end)}
        data.append(
            {
                name: {
                    "name": name,
                    "window": window,
                    "gpuHours": f.gpu_hours,
                    "gpuCost": f.gpu_cost,
                    "cpuCoreHours": f.cpu_core_hours,
                    "cpuCost": f.cpu_cost,
                    "ramGiBHours": f.ram_gib_hours,
                    "ramCost": f.ram_cost,
                    "sharedIdleCost": f.shared_idle_cost,
                    "totalCost": f.total_cost,
                    "gpuEfficiency": f.gpu_efficiency,
                }
                for name, f in groups.items()
            }
        )
    totals = {
        name: {"name": name, **{k: _number(v) for k, v in f.as_dict().items()}} for name, f in allocation.totals.items()
    }
    body = {
        "code": 200,
        "window": {"start": _iso(allocation.start), "end": _iso(allocation.end)},
        "step": f"{allocation.step_hours}h",
        "aggregate": allocation.aggregate,
        "currency": "USD",
        "data": data,
        "totals": totals,
    }
    if allocation.idle_by_model:
        body["idleByGpuModel"] = {
            model: {"gpuHours": _number(f.gpu_hours), "gpuCost": _number(f.gpu_cost)}
            for model, f in allocation.idle_by_model.items()
        }
    return body


def allocation_csv(allocation: pricing.Allocation) -> dict:
    rows = []
    for start, end, groups in allocation.steps:
        s, e = _iso(start), _iso(end)
        for name, f in groups.items():
            rows.append(
                [
                    s, e, name, f.gpu_hours, f.gpu_cost, f.cpu_core_hours, f.cpu_cost, f.ram_gib_hours,
                    f.ram_cost, f.shared_idle_cost, f.total_cost, "" if f.gpu_efficiency is None else f.gpu_efficiency,
                ]
            )  # fmt: skip
    return {"columns": CSV_COLUMNS, "rows": rows}


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
    def get(self, request, format=None):
        try:
            query = allocation_query_from_params(request.query_params, user=request.user, now=timezone.now())
        except pricing.WindowError as exc:
            raise ValidationError({"detail": str(exc)}) from exc
        allocation = cost_allocation(query)
        if getattr(request.accepted_renderer, "format", "") == "csv":
            response = Response(allocation_csv(allocation))
            response["Content-Disposition"] = (
                f'attachment; filename="cost-{allocation.aggregate.replace(":", "-")}-'
                f'{allocation.start:%Y%m%d%H}-{allocation.end:%Y%m%d%H}.csv"'
            )
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
    def get(self, request):
        statuses = budget_status_list(teams=team_list_for_user(user=request.user), now=timezone.now())
        return Response({"results": BudgetStatusSerializer(statuses, many=True).data})
