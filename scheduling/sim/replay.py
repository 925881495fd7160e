"""Replay mode: pods arrive at ``creation_time``, leave after their original run time, and queue.

Event loop (discrete time, no clock):

1. Events are pod arrivals (at ``creation_time``) and pod completions. At one timestamp completions
   are applied first (they free capacity), then arrivals join the queue.
2. After the events of a timestamp, the queue is scanned in order (priority by QoS class, then FIFO
   by creation time, then trace order) and every pod that fits now is placed by the policy (later
   pods may start past an earlier one that does not fit: no head-of-line blocking). A shape that
   failed once in a scan is not retried in the same scan: capacity only shrinks during a scan.
3. A started pod runs for ``deletion_time - creation_time`` (its original lifetime) and then
   completes; pods without a ``deletion_time`` run to the end of the trace.
4. Recorded: allocated GPU milli and fragmentation after every timestamp, each pod's queueing delay
   (start - creation), and the pods still queued when the trace ends.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from scheduling.engine.frag import Choice, NodeArrays, TracePlacer, TypicalPod
from scheduling.sim.trace import TracePod


@dataclass(frozen=True, slots=True)
class ReplayRun:
    policy: str
    seed: int
    pods: list[TracePod]
    created_s: np.ndarray  # arrival time in the replay (creation time / compress)
    choice: list[Choice | None]  # per pod, in trace order; None = never started
    started_s: np.ndarray  # NaN = never started
    ended_s: np.ndarray
    time_s: np.ndarray  # event timestamps
    allocated_milli: np.ndarray  # after each timestamp
    frag_milli: np.ndarray
    queued: np.ndarray  # queue length after each timestamp
    capacity_gpu_milli: int
    wall_s: float

    @property
    def wait_s(self) -> np.ndarray:
        return self.started_s - self.created_s

    def delay_percentiles(self) -> dict[str, float | int]:
        waits = self.wait_s[~np.isnan(self.started_s)]
        if waits.size == 0:
            return {"p50": None, "p90": None, "p99": None, "max": None, "mean": None, "never_started": len(self.pods)}  # type: ignore[dict-item]
        p50, p90, p99 = np.percentile(waits, [50, 90, 99])
        return {
            "p50": float(p50),
            "p90": float(p90),
            "p99": float(p99),
            "max": float(waits.max()),
            "mean": float(waits.mean()),
            "never_started": int(np.isnan(self.started_s).sum()),
        }


def run_replay(
    nodes: NodeArrays,
    pods: Sequence[TracePod],
    policy: str,
    *,
    seed: int,
    typical: Sequence[TypicalPod],
    workload: Sequence[TypicalPod] = (),
    compress: float = 1.0,
    on_event: Callable[[], None] | None = None,
) -> ReplayRun:
    """Replay ``pods`` in creation-time order. ``compress`` > 1 divides the arrival times (not the run
    times), i.e. replays the same jobs under ``compress`` times the offered load."""
    if compress <= 0:
        raise ValueError("compress must be positive")
    started_wall = time.perf_counter()
    replay = _Replay(nodes, pods, policy, seed, (typical, workload), compress, on_event)
    replay.run()
    return ReplayRun(
        policy=policy,
        seed=seed,
        pods=list(pods),
        created_s=np.array(replay.created),
        choice=replay.choice,
        started_s=replay.started,
        ended_s=replay.ended,
        time_s=np.array(replay.times),
        allocated_milli=np.array(replay.allocated, dtype=np.int64),
        frag_milli=np.array(replay.frag),
        queued=np.array(replay.queued, dtype=np.int64),
        capacity_gpu_milli=nodes.total_gpu_milli(),
        wall_s=time.perf_counter() - started_wall,
    )


class _Replay:
    """The event loop of the module docstring, over one ``TracePlacer``."""

    def __init__(
        self,
        nodes: NodeArrays,
        pods: Sequence[TracePod],
        policy: str,
        seed: int,
        plan: tuple[Sequence[TypicalPod], Sequence[TypicalPod]],
        compress: float,
        on_event: Callable[[], None] | None,
    ) -> None:
        typical, workload = plan  # FGD's typical pods; every shape (portal's scarcity)
        rank = np.random.default_rng([seed, 0x0DE]).permutation(len(nodes))
        rng = np.random.default_rng([seed, 0x5EED])
        self.placer = TracePlacer(nodes, policy, typical=typical, workload=workload, rng=rng, node_rank=rank)
        self.pods = pods
        self.on_event = on_event
        n = len(pods)
        self.requests = [p.request() for p in pods]
        self.choice: list[Choice | None] = [None] * n
        self.started = np.full(n, np.nan)
        self.ended = np.full(n, np.nan)
        self.created = [p.creation_time_s / compress for p in pods]
        # (time, kind, order, pod index): kind 0 = completion before 1 = arrival at the same timestamp.
        self.events: list[tuple[float, int, int, int]] = [(t, 1, i, i) for i, t in enumerate(self.created)]
        heapq.heapify(self.events)
        self.queue: list[tuple[int, float, int]] = []  # (-priority, creation, index), sorted per scan
        self.times: list[float] = []
        self.allocated: list[int] = []
        self.frag: list[float] = []
        self.queued: list[int] = []
        self.allocated_now = 0

    def run(self) -> None:
        while self.events:
            now = self.events[0][0]
            # 1. This timestamp's completions, then its arrivals.
            self._take_events(now)
            # 2.-3. Start every queued pod that fits now.
            self._scan(now)
            # 4. Record.
            self.times.append(now)
            self.allocated.append(self.allocated_now)
            self.frag.append(self.placer.frag_milli())
            self.queued.append(len(self.queue))

    def _take_events(self, now: float) -> None:
        events, pods = self.events, self.pods
        while events and events[0][0] == now:
            _, kind, _, i = heapq.heappop(events)
            if kind == 0:
                c = self.choice[i]
                assert c is not None
                self.placer.release(self.requests[i], c)
                self.allocated_now -= pods[i].total_gpu_milli
            else:
                self.queue.append((-pods[i].priority, self.created[i], i))
            if self.on_event is not None:
                self.on_event()

    def _scan(self, now: float) -> None:
        self.queue.sort()
        failed_shapes: set[tuple[int, int, int, int, tuple[str, ...]]] = set()
        keep: list[tuple[int, float, int]] = []
        for entry in self.queue:
            i = entry[2]
            req = self.requests[i]
            shape = (req.cpu_milli, req.memory_mib, req.gpu_milli, req.gpu_count, req.allowed_models)
            c = None if shape in failed_shapes else self.placer.place(req)
            if c is None:
                failed_shapes.add(shape)
                keep.append(entry)
                continue
            self._start(i, c, now)
        self.queue = keep

    def _start(self, i: int, c: Choice, now: float) -> None:
        pod = self.pods[i]
        self.choice[i] = c
        self.started[i] = now
        self.allocated_now += pod.total_gpu_milli
        deletion = pod.deletion_time_s
        if deletion is not None:
            end = now + max(0.0, deletion - pod.creation_time_s)
            self.ended[i] = end
            heapq.heappush(self.events, (end, 0, i, i))


def downsample(x: np.ndarray, *ys: np.ndarray, points: int = 2000) -> list[list[float]]:
    """Evenly thinned copies of a time series for the report (keeps first and last sample)."""
    if x.size <= points:
        return [x.tolist(), *(y.tolist() for y in ys)]
    keep = np.unique(np.linspace(0, x.size - 1, points).round().astype(np.int64))
    return [x[keep].tolist(), *(y[keep].tolist() for y in ys)]
