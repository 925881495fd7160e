"""Workload variants of a pod list, made with the recipe of the paper's extra traces.

The paper's ``openb_pod_list_*`` variants are sampled from the default list to emphasise one kind of
workload. Each function here does the same, seeded, and keeps the pod count of the input:

- ``gpushare(pods, pct)``: GPU-sharing pods are ``pct`` % of the GPU pods (default trace: ~44 %).
- ``multigpu(pods, pct)``: multi-GPU pods are ``pct`` % of the GPU pods (default: ~1 %).
- ``gpuspec(pods, pct, nodes)``: ``pct`` % of the GPU pods may only run on some GPU models (1 to 3
  models drawn, weighted by their GPU count, among those that have a node with enough devices for
  the pod: constraints name the big pools more often, as in production).
- ``cpuonly(pods, factor)``: ``factor`` times as many CPU-only pods (drawn from the CPU-only pods),
  the GPU pods unchanged.

Class sizes are fixed by rounding; pods of a class are drawn uniformly with replacement from that
class of the input and renamed ``<name>-v<i>`` so names stay unique. Nothing is written into the
repository: ``python -m scheduling.sim.variants --out DIR`` writes the CSVs to ``DIR``.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from scheduling.sim.trace import TraceNode, TracePod, read_nodes, read_pods, write_pods

DEFAULT_VARIANTS = ("gpushare80", "multigpu20", "gpuspec33", "cpuonly200")


def _draw(pool: Sequence[TracePod], count: int, rng: np.random.Generator) -> list[TracePod]:
    if count <= 0 or not pool:
        return []
    return [pool[int(i)] for i in rng.integers(len(pool), size=count)]


def _rename(pods: list[TracePod], rng: np.random.Generator) -> list[TracePod]:
    order = rng.permutation(len(pods))
    return [dataclasses.replace(pods[j], name=f"{pods[j].name}-v{i}") for i, j in enumerate(order)]


def _classes(pods: Sequence[TracePod]) -> tuple[list[TracePod], list[TracePod], list[TracePod], list[TracePod]]:
    cpu = [p for p in pods if p.gpu_count == 0]
    share = [p for p in pods if p.gpu_count == 1 and p.gpu_milli < 1000]
    one = [p for p in pods if p.gpu_count == 1 and p.gpu_milli >= 1000]
    multi = [p for p in pods if p.gpu_count > 1]
    return cpu, share, one, multi


def gpushare(pods: Sequence[TracePod], pct: float, *, seed: int = 0) -> list[TracePod]:
    """GPU-sharing pods become ``pct`` % of the GPU pods; the rest keep their relative mix."""
    rng = np.random.default_rng(seed)
    cpu, share, one, multi = _classes(pods)
    gpu_total = len(pods) - len(cpu)
    n_share = round(gpu_total * pct / 100)
    rest = gpu_total - n_share
    n_multi = round(rest * len(multi) / max(1, len(one) + len(multi)))
    out = list(cpu) + _draw(share, n_share, rng) + _draw(multi, n_multi, rng) + _draw(one, rest - n_multi, rng)
    return _rename(out, rng)


def multigpu(pods: Sequence[TracePod], pct: float, *, seed: int = 0) -> list[TracePod]:
    """Multi-GPU pods become ``pct`` % of the GPU pods; the rest keep their relative mix."""
    rng = np.random.default_rng(seed)
    cpu, share, one, multi = _classes(pods)
    gpu_total = len(pods) - len(cpu)
    n_multi = round(gpu_total * pct / 100)
    rest = gpu_total - n_multi
    n_share = round(rest * len(share) / max(1, len(share) + len(one)))
    out = list(cpu) + _draw(multi, n_multi, rng) + _draw(share, n_share, rng) + _draw(one, rest - n_share, rng)
    return _rename(out, rng)


def gpuspec(pods: Sequence[TracePod], pct: float, nodes: Sequence[TraceNode], *, seed: int = 0) -> list[TracePod]:
    """``pct`` % of the GPU pods (drawn at random) may only use 1-3 GPU models that can host them."""
    rng = np.random.default_rng(seed)
    most: dict[str, int] = {}
    gpus: dict[str, int] = {}
    for n in nodes:
        if n.gpu_model and n.gpu_count > 0:
            most[n.gpu_model] = max(most.get(n.gpu_model, 0), n.gpu_count)
            gpus[n.gpu_model] = gpus.get(n.gpu_model, 0) + n.gpu_count
    models = sorted(most)
    gpu_idx = [i for i, p in enumerate(pods) if p.gpu_count > 0]
    chosen = (
        set(rng.choice(gpu_idx, size=round(len(gpu_idx) * pct / 100), replace=False).tolist()) if gpu_idx else set()
    )
    out = []
    for i, p in enumerate(pods):
        if i in chosen:
            able = [m for m in models if most[m] >= p.gpu_count]
            k = min(len(able), int(rng.integers(1, 4)))
            weights = np.array([gpus[m] for m in able], dtype=np.float64)
            picked: list[str] = (
                [str(m) for m in rng.choice(able, size=k, replace=False, p=weights / weights.sum())] if able else []
            )
            spec = tuple(sorted(picked))
            p = dataclasses.replace(p, allowed_models=spec)
        out.append(p)
    return _rename(out, rng)


def cpuonly(pods: Sequence[TracePod], factor: float, *, seed: int = 0) -> list[TracePod]:
    """``factor`` times as many CPU-only pods (resampled); GPU pods unchanged."""
    rng = np.random.default_rng(seed)
    cpu = [p for p in pods if p.gpu_count == 0]
    gpu = [p for p in pods if p.gpu_count > 0]
    return _rename(gpu + _draw(cpu, round(len(cpu) * factor), rng), rng)


def make(name: str, pods: Sequence[TracePod], nodes: Sequence[TraceNode], *, seed: int = 0) -> list[TracePod]:
    """A variant by name: ``gpushare<pct>``, ``multigpu<pct>``, ``gpuspec<pct>``, ``cpuonly<percent>``."""
    makers: dict[str, Callable[[float], list[TracePod]]] = {
        "gpushare": lambda v: gpushare(pods, v, seed=seed),
        "multigpu": lambda v: multigpu(pods, v, seed=seed),
        "gpuspec": lambda v: gpuspec(pods, v, nodes, seed=seed),
        "cpuonly": lambda v: cpuonly(pods, v / 100, seed=seed),
    }
    for prefix, maker in makers.items():
        if name.startswith(prefix) and name[len(prefix) :].isdigit():
            return maker(float(name[len(prefix) :]))
    raise ValueError(f"unknown variant {name!r}; e.g. {', '.join(DEFAULT_VARIANTS)}")


def main(argv: Sequence[str] | None = None) -> int:
    from scheduling.sim.cli import DEFAULT_NODES, DEFAULT_PODS

    parser = argparse.ArgumentParser(prog="python -m scheduling.sim.variants", description=__doc__.splitlines()[0])
    parser.add_argument("--pods", default=DEFAULT_PODS)
    parser.add_argument("--nodes", default=DEFAULT_NODES)
    parser.add_argument("--out", required=True, help="directory for openb_pod_list_<variant>.csv")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("variants", nargs="*", default=list(DEFAULT_VARIANTS))
    args = parser.parse_args(argv)
    pods, nodes = read_pods(args.pods), read_nodes(args.nodes)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.variants:
        path = out / f"openb_pod_list_{name}.csv"
        write_pods(path, make(name, pods, nodes, seed=args.seed))
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
