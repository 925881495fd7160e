"""Exact units and time pieces (``billing.core.units``); the billed share they count in."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from billing.core.units import US_PER_HOUR, hour_pieces, ratio_to_decimal
from scheduling.engine.shares import BILLED_UNITS_PER_GPU, billed_units, billed_units_of_gpus
from tests.billing.conftest import utc


@given(st.integers(min_value=0, max_value=10**30), st.integers(min_value=1, max_value=10**20))
def test_ratio_rounding_is_exact_half_even(numerator, denominator):
    expected = Decimal(round(Fraction(numerator, denominator) * 10**6)).scaleb(-6)
    assert ratio_to_decimal(numerator, denominator) == expected


@pytest.mark.parametrize(
    ("gpus", "sevenths_of_a_milli"),
    [("1", 7000), ("0.250000", 1750), ("0.428571", 3000), ("1.285714", 9000), ("0.142857", 1000), ("8", 56000)],
)
def test_every_legal_share_is_a_whole_number_of_7000ths(gpus, sevenths_of_a_milli):
    assert billed_units_of_gpus(gpus) == sevenths_of_a_milli


@given(
    st.datetimes(min_value=utc(2026, 1, 1).replace(tzinfo=None), max_value=utc(2026, 12, 1).replace(tzinfo=None)),
    st.integers(min_value=1, max_value=10 * 86_400 * 10**6),
)
def test_hour_pieces_add_up_to_the_interval(start, micros):
    start = start.replace(tzinfo=utc(2026, 1, 1).tzinfo)
    end = start + timedelta(microseconds=micros)
    pieces = hour_pieces(start, end)
    assert sum(m for _, m in pieces) == micros
    assert all(0 < m <= US_PER_HOUR for _, m in pieces)
    assert [h for h, _ in pieces] == list(range(pieces[0][0], pieces[0][0] + len(pieces)))


@pytest.mark.parametrize(
    ("profile", "gpus"),
    [
        # NVIDIA MIG user guide: an A30 has 4 compute slices, A100/H100/H200 have 7.
        ("1g.6gb", Fraction(1, 4)),
        ("2g.12gb", Fraction(2, 4)),
        ("2g.12gb+me", Fraction(2, 4)),
        ("4g.24gb", Fraction(1)),
        ("1g.5gb", Fraction(1, 7)),
        ("3g.40gb", Fraction(3, 7)),
        ("7g.80gb", Fraction(1)),
        ("1g.12gb", Fraction(1, 7)),  # H100-94GB and H100-96GB both list it; both have 7
        ("3g.71gb", Fraction(3, 7)),
    ],
)
def test_a_mig_slice_bills_its_share_of_its_gpus_compute_slices(profile, gpus):
    assert Fraction(billed_units(mig_profile=profile), BILLED_UNITS_PER_GPU) == gpus
