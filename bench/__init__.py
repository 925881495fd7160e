"""Benchmarks and the chaos run (each a script: ``python bench/NAME.py``)."""
