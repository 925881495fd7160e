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

from scheduling.engine.frag import Choice, NodeArrays, Placer, TypicalPod
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
    target: Sequence[TypicalPod] = (),
    compress: float = 1.0,
    on_event: Callable[[], None] | None = None,
) -> ReplayRun:
    """Replay ``pods`` in creation-time order. ``compress`` > 1 divides the arrival times (not the run
    times), i.e. replays the same jobs under ``compress`` times the offered load."""
    if compress <= 0:
        raise ValueError("compress must be positive")
    started_wall = time.perf_counter()
    rank = np.random.default_rng([seed, 0x0DE]).permutation(len(nodes))
    placer = Placer(
        nodes, policy, typical=typical, target=target, rng=np.random.default_rng([seed, 0x5EED]), node_rank=rank
    )
    n = len(pods)
    requests = [p.request() for p in pods]
    choice: list[Choice | None] = [None] * n
    started = np.full(n, np.nan)
    ended = np.full(n, np.nan)
    # (time, kind, order, pod index): kind 0 = completion before 1 = arrival at the same timestamp.
    created = [p.creation_time_s / compress for p in pods]
    events: list[tuple[float, int, int, int]] = [(t, 1, i, i) for i, t in enumerate(created)]
    heapq.heapify(events)
    queue: list[tuple[int, float, int]] = []  # (-priority, creation, index), kept sorted
    times: list[float] = []
    allocated: list[int] = []
    frag: list[float] = []
    queued: list[int] = []
    allocated_now = 0
    while events:
        now = events[0][0]
        while events and events[0][0] == now:
            _, kind, _, i = heapq.heappop(events)
            if kind == 0:
                c = choice[i]
                assert c is not None
                placer.release(requests[i], c)
                allocated_now -= pods[i].total_gpu_milli
            else:
                queue.append((-pods[i].priority, created[i], i))
            if on_event is not None:
                on_event()
        queue.sort()
        failed_shapes: set[tuple[int, int, int, int, tuple[str, ...]]] = set()
        keep: list[tuple[int, float, int]] = []
        for entry in queue:
            i = entry[2]
            req = requests[i]
            shape = (req.cpu_milli, req.memory_mib, req.gpu_milli, req.gpu_count, req.allowed_models)
            c = None if shape in failed_shapes else placer.place(req)
            if c is None:
                failed_shapes.add(shape)
                keep.append(entry)
                continue
            choice[i] = c
            started[i] = now
            allocated_now += pods[i].total_gpu_milli
            deletion = pods[i].deletion_time_s
            if deletion is not None:
                end = now + max(0.0, deletion - pods[i].creation_time_s)
                ended[i] = end
                heapq.heappush(events, (end, 0, i, i))
        queue = keep
        times.append(now)
        allocated.append(allocated_now)
        frag.append(placer.frag_milli())
        queued.append(len(queue))
    return ReplayRun(
        policy=policy,
        seed=seed,
        pods=list(pods),
        created_s=np.array(created),
        choice=choice,
        started_s=started,
        ended_s=ended,
        time_s=np.array(times),
        allocated_milli=np.array(allocated, dtype=np.int64),
        frag_milli=np.array(frag),
        queued=np.array(queued, dtype=np.int64),
        capacity_gpu_milli=nodes.total_gpu_milli(),
        wall_s=time.perf_counter() - started_wall,
    )


def downsample(x: np.ndarray, *ys: np.ndarray, points: int = 2000) -> list[list[float]]:
    """Evenly thinned copies of a time series for the report (keeps first and last sample)."""
    if x.size <= points:
        return [x.tolist(), *(y.tolist() for y in ys)]
    keep = np.unique(np.linspace(0, x.size - 1, points).round().astype(np.int64))
    return [x[keep].tolist(), *(y[keep].tolist() for y in ys)]
