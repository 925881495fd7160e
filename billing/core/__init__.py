"""Billing's pure core: exact units, windows, prices, usage arithmetic, allocation assembly, advice.

No Django, no database, no clock, no I/O: callers pass ``now`` and plain values. The core imports only
the standard library and ``scheduling.engine.shares`` (the billed share of a GPU, defined once there);
``tests/billing/core/test_purity.py`` checks it.

Modules, from the bottom:

* ``units``: integer units (1/7000 GPU × µs, milli-core × µs, MiB × µs, 10^-6 USD), the cost formula
  (``Meter``), exact rounding, hour pieces.
* ``windows``: hour-aligned windows, months and steps as values.
* ``prices``: the price book as values, piecewise-constant price segments, lookup by hour.
* ``intervals``: Running intervals from job histories (the one builder).
* ``usage``: what an interval used, cut at hour boundaries and priced; idle capacity.
* ``allocation``: exact sums, figures, and the assembly of an allocation.
* ``advice``: efficiency recommendations and budget thresholds.
"""
