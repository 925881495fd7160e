"""What victim selection (``preemption.select_victims``) asks of placement for one job and shape:
whether the gang fits now, whether a holder sits on a node the job could use, whether removing a holder
made one of its nodes fit a replica, and where a trial placement of the gang goes (with its further pod
sets, ``podsets``, all or nothing). Each answer is taken on the cluster as it is when asked (victim
selection removes and restores holders in between)."""

from __future__ import annotations

import numpy as np

from . import podsets
from .capacity import Statement
from .fit import Shape, fits_node
from .model import Workload
from .placement import Placer
from .preemption import Holder

_FEW = 4  # up to this many nodes are tested one by one


class PlacementProbes:
    def __init__(self, placer: Placer, job: Workload, shape: Shape, sets: tuple[podsets.Member, ...] = ()) -> None:
        self.placer = placer
        self.sets = sets
        self.cluster = placer.cluster
        self.job = job
        self.shape = shape
        self.eligible = np.zeros(self.cluster.n, dtype=bool)  # the static filters, fixed for a cycle
        self.eligible[placer.eligible(job, shape)] = True
        # Per holder (by id: the search keeps every holder it asks about alive), its nodes that pass the
        # static filters: they do not change while the victims are searched.
        self._useful: dict[int, np.ndarray] = {}

    def fits(self) -> bool:
        if not self.sets:
            return self.placer.can_place(self.job, self.shape, self.job.gang_size)
        return bool(self.placed_on())

    def _nodes_of(self, holder: Holder) -> np.ndarray:
        index = self.cluster.index
        return np.array([index[p.node] for p in holder.placements if p.node in index], dtype=np.int64)

    def _useful_nodes(self, holder: Holder) -> np.ndarray:
        useful = self._useful.get(id(holder))
        if useful is None:
            nodes = self._nodes_of(holder)
            useful = self._useful[id(holder)] = nodes[self.eligible[nodes]]
        return useful

    def on_useful_node(self, holder: Holder) -> bool:
        return bool(len(self._useful_nodes(holder)))

    def frees_a_node(self, holder: Holder) -> bool:
        useful = self._useful_nodes(holder)
        if len(useful) <= _FEW:  # a holder's few nodes: the scalar form of the fit rule beats array calls
            return any(fits_node(self.cluster, self.shape, node) for node in useful.tolist())
        return bool(len(self.placer.feasible(self.shape, useful)))

    def placed_on(self) -> set[str]:
        trial = Statement(self.cluster)
        gang = self.job.gang_size
        result = self.placer.place_gang(self.job, self.shape, trial, gang, gang, explain=False)
        placements = result.placements
        if result.explanation is None and self.sets:
            more, failed = podsets.place(self.sets, trial, self.placer.place_gang)
            placements = () if failed is not None else placements + more
        trial.discard()
        return {p.node for p in placements}
