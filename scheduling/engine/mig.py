"""MIG geometry: which slices a profile takes and where it may start.

An A100 or H100 has 7 compute slices and 8 memory slices. A profile ``<c>g.<m>gb`` takes ``c`` compute
slices and ``m / (device memory / 8)`` memory slices, and may only start at the memory-slice positions
NVIDIA allows for that size (for example ``3g.40gb`` at 0 or 4, ``7g.80gb`` only at 0). The engine
tracks a device as an 8-bit mask of used memory slices plus a count of used compute slices.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

MEMORY_SLICES = 8
COMPUTE_SLICES = 7

# (compute slices, memory slices) -> valid first memory slice (NVIDIA MIG user guide, A100/H100 tables).
_STARTS: dict[tuple[int, int], tuple[int, ...]] = {
    (1, 1): (0, 1, 2, 3, 4, 5, 6),
    (1, 2): (0, 2, 4, 6),
    (2, 2): (0, 2, 4),
    (3, 4): (0, 4),
    (4, 4): (0,),
    (7, 8): (0,),
}

_PROFILE = re.compile(r"^(\d)g\.(\d+)gb(?:\+me)?$")


def parse_mig_profile(profile: str) -> tuple[int, int] | None:
    """``(compute slices, memory GiB)`` of a profile name such as ``3g.40gb``; ``None`` if not one."""
    match = _PROFILE.match(profile)
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2))


@dataclass(frozen=True, slots=True)
class MigGeometry:
    profile: str
    compute: int
    memory_slices: int
    starts: tuple[int, ...]

    @property
    def gpu_milli(self) -> int:
        """Quota charge: the memory share of the device, in thousandths of a GPU."""
        return self.memory_slices * 1000 // MEMORY_SLICES

    def mask_at(self, start: int) -> int:
        return ((1 << self.memory_slices) - 1) << start


def mig_geometry(profile: str, device_memory_gib: int) -> MigGeometry | None:
    """Geometry of ``profile`` on a device with ``device_memory_gib``; ``None`` if it cannot exist there.

    The memory-slice count is the profile memory over one eighth of the device, rounded to the nearest
    size NVIDIA uses (1, 2, 4 or 8), so ``1g.10gb`` on an 80 GiB device is one slice and ``1g.20gb``
    two. Unknown shapes fall back to aligned starts (start a multiple of the size).
    """
    parsed = parse_mig_profile(profile)
    if parsed is None or device_memory_gib <= 0:
        return None
    compute, memory_gib = parsed
    raw = memory_gib * MEMORY_SLICES / device_memory_gib
    memory_slices = min((1, 2, 4, 8), key=lambda size: (abs(size - raw), size))
    if compute > COMPUTE_SLICES or raw > MEMORY_SLICES * 1.1:
        return None
    starts = _STARTS.get((compute, memory_slices))
    if starts is None:
        starts = tuple(range(0, MEMORY_SLICES - memory_slices + 1, memory_slices))
    return MigGeometry(profile, compute, memory_slices, starts)


def default_device_memory_gib(gpu_model: str) -> int:
    """Best guess of per-device memory from a model name such as ``A100-80GB``; 0 if unknown."""
    match = re.search(r"(\d+)\s*G(?:i)?B", gpu_model, re.IGNORECASE)
    return int(match.group(1)) if match else 0


def devices_for_memory(memory_gib: int, device_memory_gib: int) -> int:
    """Whole devices needed to hold ``memory_gib`` (a 70B model at ~140 GiB needs 2 x 80 GiB)."""
    if device_memory_gib <= 0:
        return 0
    return max(1, math.ceil(memory_gib / device_memory_gib))
