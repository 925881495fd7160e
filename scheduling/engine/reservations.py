"""Backfill reservations (Slurm's backfill): the rule, in one place.

The first ``Policy.reserved_jobs`` jobs of a cycle's order that wait for capacity (a placement or gang
reason) on whole GPUs get a **reservation**: the devices (and CPU, memory) they would get at their
**shadow time**, the earliest start the forecast gives them from the jobs running now and the
reservations made before theirs (``estimate.Forecast``, those jobs alone). A job decided after a
reservation was made may use the reserved room only if it is expected to end by the shadow time
(:func:`applies`); else the reserved room free now is taken out of the cluster while it is decided
(:class:`Holds`), so it starts now only if it fits in what is left.

So a reserved job's start does not move with later submissions of lower order, and a large job is not
starved by smaller ones taking every GPU that frees up. The cost: reserved room free before the shadow
time idles unless a short job fits in it.

Used by the cycle (step 3), its forecast (every waiting job not reserved, and each reserved job by the
reservations made before it, until each reserved job starts), the dry run's trial (the reservations
made before the job's place in the cycle's order) and the dry run's replay of the forecast.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace

from .capacity import FULL, Cluster
from .model import Reason, ReplicaPlacement


@dataclass(frozen=True, slots=True)
class Reservation:
    """Room held for ``job_id`` from now until ``shadow``, where the forecast starts it.

    ``order``: where the cycle decided the job, ``(pass, admission key)`` (``admission.AdmissionOrder``),
    so that a job decided later is known (the dry run's trial)."""

    job_id: str
    shadow: float
    gpu_model: str | None
    placements: tuple[ReplicaPlacement, ...]
    order: tuple[object, ...] = ()


def applies(reservation: Reservation, end: float) -> bool:
    """The rule: a job expected to end at ``end`` may not use ``reservation``'s room when it would still
    run at the reservation's shadow time."""
    return end > reservation.shadow


def reservable(placements: Sequence[ReplicaPlacement]) -> bool:
    """Whether a job placed so may hold a reservation: whole GPUs only (a fraction or a MIG slice
    takes the first device that frees up; reserving one would idle a device for a small job)."""
    return bool(placements) and all(p.gpu_indices and p.gpu_milli >= FULL and p.mig_profile is None for p in placements)


def active(
    reservations: Sequence[Reservation], end: float, before: int | None = None, started: Collection[str] = ()
) -> tuple[int, ...]:
    """The indices of the reservations a job expected to end at ``end`` must leave alone: of the first
    ``before`` (all by default), those whose job has not ``started`` and that :func:`applies`."""
    limit = len(reservations) if before is None else before
    return tuple(k for k, r in enumerate(reservations[:limit]) if r.job_id not in started and applies(r, end))


class Holds:
    """Reserved room taken out of a cluster while a job that may not use it is decided.

    ``set(reservations, indices)`` takes, for each reservation of ``indices``, the part of its room
    that is free now: on each reserved device whatever is free of it (a device still held by a job
    that ends before the shadow time is not free, and so not taken), and on each reserved node up to
    the reserved CPU and memory that is free. ``clear`` gives it back. Changes go through
    ``Cluster.apply`` (the scorers follow them) and are given back before anything else changes the
    state the holds were computed on (callers ``clear`` first)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.indices: tuple[int, ...] = ()
        self.taken: list[ReplicaPlacement] = []
        self.gpus = 0  # devices (whole or in part) held
        self.cpu_milli = 0
        self.memory_mib = 0

    def set(self, reservations: Sequence[Reservation], indices: tuple[int, ...]) -> None:
        if indices == self.indices:
            return
        self.clear()
        for k in indices:
            self._take(reservations[k])
        self.indices = indices

    def clear(self) -> None:
        for placement in reversed(self.taken):
            self.cluster.apply(placement, -1)
        self.taken.clear()
        self.indices = ()
        self.gpus = self.cpu_milli = self.memory_mib = 0

    def _take(self, reservation: Reservation) -> None:
        c = self.cluster
        for p in reservation.placements:
            i = c.index.get(p.node)
            if i is None:
                continue
            for d in p.gpu_indices:
                if d >= c.width or c.mig_node[i] or int(c.mig_mask[i, d]):
                    continue
                free = int(c.dev_free[i, d])
                if free <= 0:
                    continue
                self._apply(ReplicaPlacement(p.node, (d,), FULL if free >= int(c.dev_cap[i]) else free))
                self.gpus += 1
            cpu = min(p.cpu_milli, max(0, int(c.cpu_free[i])))
            memory = min(p.memory_mib, max(0, int(c.mem_free[i])))
            if cpu or memory:
                self._apply(ReplicaPlacement(p.node, cpu_milli=cpu, memory_mib=memory))
                self.cpu_milli += cpu
                self.memory_mib += memory

    def _apply(self, placement: ReplicaPlacement) -> None:
        self.cluster.apply(placement, 1)
        self.taken.append(placement)


def held_reason(reason: Reason, holds: Holds, reservations: Sequence[Reservation]) -> Reason:
    """``reason`` of a job decided while ``holds`` held reserved room out, saying so: the counts in the
    reason are of the room left."""
    ids = ", ".join(reservations[k].job_id for k in holds.indices)
    held = f"{holds.gpus} GPU(s), {holds.cpu_milli / 1000:g} CPU cores, {holds.memory_mib / 1024:.4g} GiB memory"
    message = (
        f"{reason.message}; not counted: free {held} reserved for {ids}, which start(s) first "
        "(this job would still run then)"
    )
    details = (
        *reason.details,
        ("reserved_gpus", holds.gpus),
        ("reserved_cpu_milli", holds.cpu_milli),
        ("reserved_memory_mib", holds.memory_mib),
        ("reserved_for", ids),
    )
    return replace(reason, message=message, details=details)
