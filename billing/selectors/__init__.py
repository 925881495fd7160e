"""Billing's reads, one module per question they answer:

* ``allocation``: cost per group and step over a window (the allocation API, the cost page);
* ``rollups``: reading the hourly rollups for an allocation;
* ``budgets``: month-to-date spend, hard stops, budget status and alerts;
* ``efficiency``: utilization per job and team, with advice;
* ``invoices``: a team's month per GPU model and capacity type;
* ``jobs``: run time, GPU-hours and cost per job and attempt (job pages, the job list, the API);
* ``usage``: Running intervals, running jobs' usage, GPU-hours per day;
* ``prices``: the price book and whether the priced rollup is current;
* ``capacity``: recorded GPU capacity.

The names below are the read API other apps and billing's entry points use.
"""

from billing.core.allocation import AllocationQuery
from billing.selectors.allocation import cost_allocation
from billing.selectors.budgets import (
    BudgetStatus,
    budget_alert_list,
    budget_status_list,
    month_gpu_spend,
    teams_over_budget,
)
from billing.selectors.efficiency import JobEfficiency, TeamEfficiency, job_efficiency_list, team_efficiency_list
from billing.selectors.invoices import InvoiceLine, invoice_lines
from billing.selectors.jobs import (
    JOB_SORTS,
    AttemptCost,
    AttemptRun,
    JobCost,
    JobCostReport,
    ListFigures,
    job_cost_report,
    job_costs,
    job_list_costed,
    job_ordering,
    list_figures,
)
from billing.selectors.prices import cost_rollup_current
from billing.selectors.usage import gpu_hours_by_team_and_day, run_interval_list, running_usage

__all__ = [
    "JOB_SORTS",
    "AllocationQuery",
    "AttemptCost",
    "AttemptRun",
    "BudgetStatus",
    "InvoiceLine",
    "JobCost",
    "JobCostReport",
    "JobEfficiency",
    "ListFigures",
    "TeamEfficiency",
    "budget_alert_list",
    "budget_status_list",
    "cost_allocation",
    "cost_rollup_current",
    "gpu_hours_by_team_and_day",
    "invoice_lines",
    "job_cost_report",
    "job_costs",
    "job_efficiency_list",
    "job_list_costed",
    "job_ordering",
    "list_figures",
    "month_gpu_spend",
    "run_interval_list",
    "running_usage",
    "team_efficiency_list",
    "teams_over_budget",
]
