"""Kubernetes quantities in the engine's units."""

from __future__ import annotations

import pytest

from scheduling.adapters.k8s.resources import cpu_milli_of, memory_mib_of


@pytest.mark.parametrize(
    ("value", "milli"),
    [("3800m", 3800), ("4", 4000), ("0.5", 500), ("1e3", 1_000_000), (2, 2000)],
)
def test_it_parses_cpu_quantities(value, milli):
    assert cpu_milli_of(value) == milli


@pytest.mark.parametrize(("value", "mib"), [("16Gi", 16384), ("1024Mi", 1024), ("1048576Ki", 1024), ("1G", 953)])
def test_it_parses_memory_quantities(value, mib):
    assert memory_mib_of(value) == mib
