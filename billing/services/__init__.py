"""Billing's writes, one module per what they write:

* ``metering``: usage records from Running intervals (and their rollups, in the same transaction);
* ``rollups``: the hourly rollups, re-pricing, rebuilding; the metering lock;
* ``capacity``: capacity snapshots;
* ``budgets``: budget alerts and the hard stop's team holds;
* ``prices``: the price book's seed.

The names below are the write API other apps, tasks and commands use.
"""

from billing.services.budgets import budget_check, budget_holds_refresh
from billing.services.capacity import capacity_record
from billing.services.metering import metering_run
from billing.services.prices import price_book_seed_defaults
from billing.services.rollups import cost_rollup_reprice, group_rollup_rebuild, rollup_rebuild

__all__ = [
    "budget_check",
    "budget_holds_refresh",
    "capacity_record",
    "cost_rollup_reprice",
    "group_rollup_rebuild",
    "metering_run",
    "price_book_seed_defaults",
    "rollup_rebuild",
]
