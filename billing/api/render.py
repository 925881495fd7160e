"""The allocation as the API's JSON body or CSV rows: the edge where figures become floats.

Step figures are already floats (chart data); window totals are exact Decimals, converted here, once.
"""

from __future__ import annotations

import csv
import io
from datetime import datetime
from decimal import Decimal
from typing import Any

from rest_framework import renderers

from billing.core.allocation import Allocation

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

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None) -> bytes:
        out = io.StringIO()
        writer = csv.writer(out)
        if isinstance(data, dict) and "rows" in data:
            writer.writerow(data.get("columns", CSV_COLUMNS))
            writer.writerows(data["rows"])
        else:  # an error body
            writer.writerow(["detail"])
            writer.writerow([data.get("detail", "") if isinstance(data, dict) else str(data)])
        return out.getvalue().encode("utf-8")


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _number(value: Decimal | float | None) -> float | None:
    return float(value) if value is not None else None


def allocation_json(allocation: Allocation) -> dict[str, Any]:
    data = []
    for start, end, groups in allocation.steps:
        window = {"start": iso(start), "end": iso(end)}
        # Spelled out rather than ``**f.as_dict()``: at 72,000 figures the extra call and dict cost ~40 %.
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
    body: dict[str, Any] = {
        "code": 200,
        "window": {"start": iso(allocation.start), "end": iso(allocation.end)},
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


def allocation_csv(allocation: Allocation) -> dict[str, Any]:
    rows = []
    for start, end, groups in allocation.steps:
        s, e = iso(start), iso(end)
        for name, f in groups.items():
            rows.append(
                [
                    s, e, name, f.gpu_hours, f.gpu_cost, f.cpu_core_hours, f.cpu_cost, f.ram_gib_hours,
                    f.ram_cost, f.shared_idle_cost, f.total_cost, "" if f.gpu_efficiency is None else f.gpu_efficiency,
                ]
            )  # fmt: skip
    return {"columns": CSV_COLUMNS, "rows": rows}


def allocation_filename(allocation: Allocation) -> str:
    return f"cost-{allocation.aggregate.replace(':', '-')}-{allocation.start:%Y%m%d%H}-{allocation.end:%Y%m%d%H}.csv"
