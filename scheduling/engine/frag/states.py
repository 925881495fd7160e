"""Node states by id, kept current, and each pod shape's results per state (``NodeScorer``'s cache).

What placing a pod does to a node (``deltas``) depends only on the pod's shape and the node's state:
its GPU model row, free CPU and free milli per device, in device order. States repeat a lot (nodes of
one model running the same jobs), and a placement changes one node. So:

1. :class:`StateIndex` gives every distinct state an id and keeps each node's id current: a change of
   one node (plain numbers) interns its new state at once; a change of many marks them stale, and the
   next read interns them in one vectorised pass.
2. :class:`ShapeTable` holds one shape's delta row (score, device, the policy's measure after, FGD's
   measure after) per state id, filled only for states that shape has not met before.

Scoring a block of nodes is then two gathers (the nodes' ids, their rows) instead of a pass per node
whose state changed since that shape last scored.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import numpy as np

STATE_LIMIT = 200_000  # distinct states the index keeps before it starts over (bounded memory)


class StateIndex:
    """Per node, the id of its state; the same state always has the same id (until ``reset``)."""

    def __init__(self, n: int, width: int) -> None:
        self.width = width
        self.ids = np.full(n, -1, dtype=np.int64)  # -1: stale, interned when next read
        self._position: dict[bytes, int] = {}
        self._stale: set[int] = set(range(n))
        self._format = f"={2 + width}q"  # one int64 state row as bytes (a format string: the state pickles)
        self.epoch = 0  # bumped by ``reset``: ids of an older epoch mean nothing
        self.moved: list[int] | None = None  # when a list: every node whose id was written, in order

    def __len__(self) -> int:
        return len(self._position)

    def set_one(self, n: int, row: int, cpu: int, gpu: list[int]) -> None:
        """Node ``n`` is now in this state (``gpu``: free milli per device, -1 padded to the width)."""
        key = struct.pack(self._format, row, cpu, *gpu)
        sid = self._position.get(key)
        if sid is None:
            sid = self._position[key] = len(self._position)
        self.ids[n] = sid
        self._stale.discard(n)
        if self.moved is not None:
            self.moved.append(n)

    def known_id(self, n: int) -> int | None:
        """Node ``n``'s id if it is current (not stale), else ``None``."""
        sid = int(self.ids[n])
        return None if sid < 0 or n in self._stale else sid

    def mark(self, nodes: list[int] | range) -> None:
        """The state of ``nodes`` changed: interned when next read."""
        self._stale.update(nodes)

    def current(self, row: np.ndarray, cpu: np.ndarray, gpu: np.ndarray) -> np.ndarray:
        """Every node's id as the state is now (``row``, ``cpu``, ``gpu``: all nodes' state arrays)."""
        if self._stale:
            if len(self._position) > STATE_LIMIT:
                self.reset()
            nodes = np.fromiter(self._stale, dtype=np.int64, count=len(self._stale))
            nodes.sort()
            self._stale.clear()
            state = np.empty((nodes.size, 2 + self.width), dtype=np.int64)
            state[:, 0] = row[nodes]
            state[:, 1] = cpu[nodes]
            state[:, 2:] = gpu[nodes]
            keys = cast(list[bytes], state.view(np.dtype((np.void, state.itemsize * state.shape[1]))).ravel().tolist())
            position = self._position
            ids = []
            for key in keys:
                sid = position.get(key)
                if sid is None:
                    sid = position[key] = len(position)
                ids.append(sid)
            self.ids[nodes] = ids
            if self.moved is not None:
                self.moved.extend(nodes.tolist())
        return self.ids

    def reset(self) -> None:
        """Forget every state (ids start over; every node is interned again when next read)."""
        self._position.clear()
        self._stale.update(range(len(self.ids)))
        self.ids[:] = -1
        self.epoch += 1


@dataclass(slots=True)
class ShapeTable:
    """One shape's delta rows by state id: ``values[id]`` is (score, device, the policy's measure
    after, FGD's measure after) where ``known[id]``. The score of a state not known yet is NaN."""

    epoch: int = 0
    values: np.ndarray = field(default_factory=lambda: np.zeros((0, 4)))
    known: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    _devices: NodeDevices | None = None

    def devices(self, ids: np.ndarray) -> NodeDevices:
        """The device column read through the nodes' state ids ``ids`` (the index's own array)."""
        if self._devices is None:
            self._devices = NodeDevices(self.values, ids)
        return self._devices

    def fit(self, states: int, epoch: int) -> None:
        """Room for ``states`` ids of index epoch ``epoch`` (an older epoch's rows are dropped)."""
        if epoch != self.epoch:
            self.epoch = epoch
            self.values, self.known = np.zeros((0, 4)), np.zeros(0, dtype=bool)
            self._devices = None
        size = len(self.known)
        if size < states:
            size = max(states, 2 * size, 256)
            values = np.zeros((size, 4))
            values[:, 0] = np.nan  # the score of a state not known yet: a sum over scores tells (``NodeScorer``)
            known = np.zeros(size, dtype=bool)
            values[: len(self.known)] = self.values
            known[: len(self.known)] = self.known
            self.values, self.known = values, known
            self._devices = None


class DeviceOf(Protocol):
    """The device chosen per node, read by node index: a ``NodeDevices`` or a plain array."""

    def __getitem__(self, nodes: Any, /) -> Any: ...


class NodeDevices:
    """The device a shape's scores chose per node, read by node index (one or an index array): the
    table's device column through the nodes' state ids (read it before the nodes change)."""

    __slots__ = ("_ids", "_values")

    def __init__(self, values: np.ndarray, ids: np.ndarray) -> None:
        self._values = values
        self._ids = ids

    def __getitem__(self, nodes: int | np.ndarray) -> np.ndarray:
        return self._values[self._ids[nodes], 1].astype(np.int64)
