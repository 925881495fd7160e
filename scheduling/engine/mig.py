"""MIG geometry: NVIDIA's placement table per GPU, and the slot a new instance takes.

A MIG-capable GPU has a few compute slices and memory slices (A100, H100, H200: 7 and 8; A30: 4
and 4). A GPU instance profile takes ``c`` compute slices and a run of memory slices that may only
start where NVIDIA's table allows (for example ``3g.40gb`` at 0 or 4, ``4g.40gb`` and ``7g.80gb``
only at 0). A ``+me`` profile (media extensions) is a profile of its own, and a GPU holds at most one.
The tables below are typed from the NVIDIA MIG user guide ("Supported MIG Profiles" and the
``nvidia-smi mig -lgipp`` placements); a profile that is not in its GPU's table does not exist
there (:func:`mig_geometry` returns ``None``; the engine refuses the job, never guesses a geometry).

The engine tracks a device as a bitmask of used memory slices (bit ``ME_BIT`` set while a ``+me``
instance runs there) plus a count of used compute slices.

Slot choice (:func:`slot_loss`): among the free valid starts on a node's devices, the one after
which the device can still hold the most instances of the largest profile, then of the next
largest, and so on (each profile counted alone). So a ``3g.40gb`` on an empty A100-80GB takes
slice 4 and leaves slice 0 to a ``4g.40gb``, and ``1g.10gb`` takes slice 6.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cache

MEMORY_SLICES = 8  # A100/H100/H200; see MigTable.memory_slices for A30
COMPUTE_SLICES = 7
ME_BIT = 1 << 8  # set in a device's mask while it holds a +me instance (one per GPU)

_PROFILE = re.compile(r"^(\d)g\.(\d+)gb(\+me)?$")


@dataclass(frozen=True, slots=True)
class MigTable:
    """One GPU's MIG profiles: name -> (compute slices, memory slices, valid starts)."""

    name: str
    memory_gib: int
    compute_slices: int
    memory_slices: int
    profiles: tuple[tuple[str, int, int, tuple[int, ...]], ...]


def _table(name: str, memory_gib: int, sizes: tuple[str, ...]) -> MigTable:
    """The A100/H100/H200 layout: sizes name 1g, 1g+me, 1g (two memory slices), 2g, 3g, 4g, 7g."""
    one, one_double, two, three, four, seven = sizes
    return MigTable(
        name,
        memory_gib,
        7,
        8,
        (
            (f"1g.{one}gb", 1, 1, (0, 1, 2, 3, 4, 5, 6)),
            (f"1g.{one}gb+me", 1, 1, (0, 1, 2, 3, 4, 5, 6)),
            (f"1g.{one_double}gb", 1, 2, (0, 2, 4, 6)),
            (f"2g.{two}gb", 2, 2, (0, 2, 4)),
            (f"3g.{three}gb", 3, 4, (0, 4)),
            (f"4g.{four}gb", 4, 4, (0,)),
            (f"7g.{seven}gb", 7, 8, (0,)),
        ),
    )


# NVIDIA MIG user guide, "Supported MIG Profiles". The A100-80GB and H100-80GB tables are the same.
MIG_TABLES: tuple[MigTable, ...] = (
    MigTable(
        "A30-24GB",
        24,
        4,
        4,
        (
            ("1g.6gb", 1, 1, (0, 1, 2, 3)),
            ("1g.6gb+me", 1, 1, (0, 1, 2, 3)),
            ("2g.12gb", 2, 2, (0, 2)),
            ("2g.12gb+me", 2, 2, (0, 2)),
            ("4g.24gb", 4, 4, (0,)),
        ),
    ),
    _table("A100-40GB", 40, ("5", "10", "10", "20", "20", "40")),
    _table("A100-80GB/H100-80GB", 80, ("10", "20", "20", "40", "40", "80")),
    _table("H100-94GB", 94, ("12", "24", "24", "47", "47", "94")),
    _table("H100-96GB", 96, ("12", "24", "24", "48", "48", "96")),
    _table("H200-141GB", 141, ("18", "35", "35", "71", "71", "141")),
)


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
    media: bool = False  # a +me profile: one per GPU
    device_compute: int = COMPUTE_SLICES
    device_memory_slices: int = MEMORY_SLICES
    table: str = ""

    @property
    def gpu_milli(self) -> int:
        """Quota charge: the memory share of the device, in thousandths of a GPU."""
        return self.memory_slices * 1000 // self.device_memory_slices

    def mask_at(self, start: int) -> int:
        """The device mask bits an instance started at ``start`` holds (the +me bit included)."""
        return (((1 << self.memory_slices) - 1) << start) | (ME_BIT if self.media else 0)


def mig_table(device_memory_gib: int, profile: str = "") -> MigTable | None:
    """The table of a device with ``device_memory_gib``: the nearest in memory, within 8 % (GFD
    reports 79 GiB for an 80 GB part); when two are as near (95 GiB: the 94 and 96 GB parts), the
    one that lists ``profile``."""
    if device_memory_gib <= 0:
        return None
    near = [t for t in MIG_TABLES if abs(t.memory_gib - device_memory_gib) <= 0.08 * t.memory_gib]
    if not near:
        return None
    best = min(abs(t.memory_gib - device_memory_gib) for t in near)
    nearest = [t for t in near if abs(t.memory_gib - device_memory_gib) == best]
    listing = [t for t in nearest if any(p[0] == profile for p in t.profiles)]
    return (listing or nearest)[0]


@cache
def device_compute_slices(profile: str) -> int:
    """Compute slices of the GPU that ``profile`` names a slice of: 4 for A30 profiles (``2g.12gb``),
    7 for A100/H100/H200 ones; 7 for a name no table lists (the engine never places those)."""
    counts = {t.compute_slices for t in MIG_TABLES if any(p[0] == profile for p in t.profiles)}
    return counts.pop() if len(counts) == 1 else COMPUTE_SLICES


@cache
def mig_geometry(profile: str, device_memory_gib: int) -> MigGeometry | None:
    """Geometry of ``profile`` on a device with ``device_memory_gib``; ``None`` if NVIDIA's table for
    that device has no such profile (or no table matches the device)."""
    table = mig_table(device_memory_gib, profile)
    if table is None:
        return None
    for name, compute, memory_slices, starts in table.profiles:
        if name == profile:
            return MigGeometry(
                name,
                compute,
                memory_slices,
                starts,
                media=name.endswith("+me"),
                device_compute=table.compute_slices,
                device_memory_slices=table.memory_slices,
                table=table.name,
            )
    return None


def mig_start(used_mask: int, used_compute: int, geometry: MigGeometry) -> int | None:
    """The first valid start of ``geometry`` on a device with these used memory slices and compute
    slices, or ``None`` when the instance does not fit there."""
    if used_compute + geometry.compute > geometry.device_compute:
        return None
    for start in geometry.starts:
        if used_mask & geometry.mask_at(start) == 0:
            return start
    return None


def free_starts(used_mask: int, used_compute: int, geometry: MigGeometry) -> list[int]:
    """Every valid start of ``geometry`` free on such a device."""
    if used_compute + geometry.compute > geometry.device_compute:
        return []
    return [s for s in geometry.starts if used_mask & geometry.mask_at(s) == 0]


@cache
def headroom(table_name: str, used_mask: int, used_compute: int) -> tuple[int, ...]:
    """How many instances of each profile of the table the device could still take, each profile
    counted alone, largest profile first (7g, 4g, 3g, 2g, 1g with two slices, 1g; +me left out)."""
    table = next(t for t in MIG_TABLES if t.name == table_name)
    counts = []
    plain = [p for p in table.profiles if not p[0].endswith("+me")]
    for name, *_ in sorted(plain, key=lambda p: (-p[1], -p[2])):
        geometry = mig_geometry(name, table.memory_gib)
        assert geometry is not None
        mask, compute, count = used_mask, used_compute, 0
        while (start := mig_start(mask, compute, geometry)) is not None:
            mask |= geometry.mask_at(start)
            compute += geometry.compute
            count += 1
        counts.append(count)
    return tuple(counts)


@cache
def slot_loss(used_mask: int, used_compute: int, geometry: MigGeometry, start: int) -> tuple[int, ...]:
    """What placing ``geometry`` at ``start`` costs the device: instances lost per profile, largest
    first (smaller is better; compared lexicographically)."""
    before = headroom(geometry.table, used_mask, used_compute)
    after = headroom(geometry.table, used_mask | geometry.mask_at(start), used_compute + geometry.compute)
    return tuple(b - a for b, a in zip(before, after, strict=True))


@cache
def best_start(used_mask: int, used_compute: int, geometry: MigGeometry) -> tuple[tuple[int, ...], int] | None:
    """The free start of ``geometry`` on such a device that costs it least (``slot_loss``), the lowest
    of equals, with its loss; ``None`` when none is free. Per device state: a node's devices and the
    nodes of one model repeat the same few states."""
    starts = free_starts(used_mask, used_compute, geometry)
    return min(((slot_loss(used_mask, used_compute, geometry, s), s) for s in starts), default=None)


def default_device_memory_gib(gpu_model: str) -> int:
    """Best guess of per-device memory from a model name such as ``A100-80GB``; 0 if unknown."""
    match = re.search(r"(\d+)\s*G(?:i)?B", gpu_model, re.IGNORECASE)
    return int(match.group(1)) if match else 0


def devices_for_memory(memory_gib: int, device_memory_gib: int) -> int:
    """Whole devices needed to hold ``memory_gib`` (a 70B model at ~140 GiB needs 2 x 80 GiB)."""
    if device_memory_gib <= 0:
        return 0
    return max(1, math.ceil(memory_gib / device_memory_gib))


Slot = tuple[int, int]  # (device index, first memory slice)


def fixed_layout(
    slices: tuple[tuple[str, int], ...], gpu_count: int, device_memory_gib: int
) -> dict[str, tuple[Slot, ...]]:
    """The slots of a node whose slices exist already (the device plugin's mixed strategy advertises
    ``nvidia.com/mig-<profile>: <count>``): each advertised instance, largest profile first, on the
    first device with room at its lowest valid start. The device and start are the engine's own
    numbering of the advertised slices (the device plugin picks the real one); only the count per
    profile matters. A profile not in the device's table, or an instance that cannot be laid out
    next to the others, gets no slot."""
    geometries = [(g, count) for profile, count in slices if (g := mig_geometry(profile, device_memory_gib))]
    geometries.sort(key=lambda gc: (-gc[0].memory_slices, -gc[0].compute, gc[0].profile))
    masks, computes = [0] * gpu_count, [0] * gpu_count
    layout: dict[str, list[Slot]] = {}
    for geometry, count in geometries:
        for _ in range(count):
            for d in range(gpu_count):
                start = mig_start(masks[d], computes[d], geometry)
                if start is not None:
                    masks[d] |= geometry.mask_at(start)
                    computes[d] += geometry.compute
                    layout.setdefault(geometry.profile, []).append((d, start))
                    break
    return {profile: tuple(slots) for profile, slots in layout.items()}
