"""How much of a GPU a replica holds: the quota share and the billed share, named apart, defined once.

A whole GPU is the same under both. A fraction or a MIG slice is not:

* **quota share** (milli-GPU, ``QUOTA_MILLI_PER_GPU`` = 1000 per GPU): what a replica charges against
  its queue's quota and what the engine's capacity model holds. A fraction is its ``gpu_milli``; a MIG
  slice is its share of the device's *memory* slices (``3g.40gb`` on an 80 GB device: 4 of 8 = 500),
  because memory slices are what another profile can no longer use.
* **billed share** (units of 1/7000 GPU, ``BILLED_UNITS_PER_GPU`` = 7000 per GPU): what the bill
  charges. A fraction is ``gpu_milli`` thousandths; a MIG slice is its share of the device's
  *compute* slices (``3g.40gb``: 3/7; on an A30, which has four, ``2g.12gb``: 2/4), as NVIDIA prices
  and reports MIG. Every legal share (n GPUs, k/1000 of one, g/7, g/4) is a whole number of 1/7000,
  so sums stay exact integers.

Models, adapters, metrics and billing call these; nobody parses a MIG profile's share elsewhere.
"""

from __future__ import annotations

from decimal import Decimal

from .mig import MEMORY_SLICES, device_compute_slices, mig_geometry, parse_mig_profile
from .model import ReplicaPlacement

QUOTA_MILLI_PER_GPU = 1000
BILLED_UNITS_PER_GPU = 7000
# A string, not a Decimal: building a Decimal at import sets decimal's context variable, after which
# every numpy allocation in the engine pays a context lookup (about 1 % of a scheduling cycle).
_MICRO = "0.000001"


def mig_compute_slices(profile: str) -> int:
    """Compute slices of a MIG profile (``3g.40gb`` -> 3); 0 when it is not a MIG profile name."""
    parsed = parse_mig_profile(profile)
    return parsed[0] if parsed is not None else 0


def mig_quota_milli(profile: str, device_memory_gib: int) -> int:
    """Quota share of one MIG slice in milli-GPU: its memory slices over the device's eight.

    When the device memory is unknown (a profile on a model the catalogue has no memory for), each
    compute slice is counted as one memory slice, the smallest footprint the profile can have.
    """
    geometry = mig_geometry(profile, device_memory_gib)
    if geometry is not None:
        return geometry.gpu_milli
    return QUOTA_MILLI_PER_GPU * max(1, mig_compute_slices(profile)) // MEMORY_SLICES


def quota_milli(
    *, gpus: int = 0, gpu_milli: int = 0, mig_profile: str | None = None, device_memory_gib: int = 0
) -> int:
    """Quota share of one replica in milli-GPU (whole GPUs: 1000 each)."""
    if mig_profile:
        return mig_quota_milli(mig_profile, device_memory_gib)
    if gpus:
        return gpus * QUOTA_MILLI_PER_GPU
    return gpu_milli


def placement_quota_milli(placement: ReplicaPlacement, device_memory_gib: int) -> int:
    """Quota share a placed replica holds, from the devices it holds there."""
    if not placement.gpu_indices:
        return 0
    if placement.mig_profile:
        return mig_quota_milli(placement.mig_profile, device_memory_gib) * len(placement.gpu_indices)
    return placement.gpu_milli * len(placement.gpu_indices)


def billed_units(*, gpus: int = 0, gpu_milli: int = 0, mig_profile: str | None = None) -> int:
    """Billed share of one replica in 1/7000 GPU (a request: whole GPUs, a fraction or a MIG slice)."""
    if mig_profile:
        return mig_compute_slices(mig_profile) * BILLED_UNITS_PER_GPU // device_compute_slices(mig_profile)
    if gpus:
        return gpus * BILLED_UNITS_PER_GPU
    return gpu_milli * BILLED_UNITS_PER_GPU // QUOTA_MILLI_PER_GPU


def placement_billed_units(placement: ReplicaPlacement) -> int:
    """Billed share a placed replica holds (a MIG slice holds one device: its share of the device's
    compute slices)."""
    if placement.mig_profile:
        return billed_units(mig_profile=placement.mig_profile)
    return billed_units(gpu_milli=placement.gpu_milli) * len(placement.gpu_indices)


def billed_gpus(units: int) -> Decimal:
    """Billed units as GPUs, to the 6 decimals admissions record (3/7 -> 0.428571)."""
    return (Decimal(units) / Decimal(BILLED_UNITS_PER_GPU)).quantize(Decimal(_MICRO))


def billed_units_of_gpus(gpus: Decimal | str | float | int) -> int:
    """The inverse of :func:`billed_gpus`: a recorded share in GPUs back to exact 1/7000 units.

    The 6-decimal rounding of any legal share (3/7 = 0.428571) is well within half a unit, so
    rounding recovers it exactly.
    """
    return int((Decimal(str(gpus)) * BILLED_UNITS_PER_GPU).to_integral_value())


__all__ = [
    "BILLED_UNITS_PER_GPU",
    "QUOTA_MILLI_PER_GPU",
    "billed_gpus",
    "billed_units",
    "billed_units_of_gpus",
    "mig_compute_slices",
    "mig_quota_milli",
    "placement_billed_units",
    "placement_quota_milli",
    "quota_milli",
]
