"""The cost REST API: ``/api/v1/cost/allocation`` in the shape OpenCost users know, and budgets.

``params`` reads query strings, ``render`` turns an allocation into JSON or CSV rows (floats only
there), ``views`` wires them to the selectors.
"""
