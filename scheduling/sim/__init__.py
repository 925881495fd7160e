"""Trace simulator: replays GPU cluster traces through the engine's placement policies.

Modules: ``trace`` (openb CSV readers/writers), ``arrival`` (the FGD paper's inflation protocol),
``replay`` (arrivals, departures and a queue), ``cli`` (``main(argv)``: ``python -m scheduling.sim``
and ``manage.py simulate``), ``report`` (summary.json, placements CSVs, report.html), ``table``
(markdown results), ``variants`` (seeded workload variants). See docs/simulator.md.
"""
