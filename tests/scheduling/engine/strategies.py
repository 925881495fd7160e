"""Hypothesis strategies for the fit rule and placement: clusters with random load, replica shapes."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from scheduling.engine.capacity import Cluster
from scheduling.engine.fit import Shape
from scheduling.engine.mig import mig_geometry
from scheduling.engine.model import GpuNode, Snapshot

from .builders import RACK, ZONE, node

MODELS = ("A100-80GB", "L40S")
PROFILES = ("1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")
SHARES = (0, 0, 0, 250, 500, 1000, 1000)  # device milli in use: coarse values make ties


@st.composite
def gpu_nodes(draw: Any, mig: bool = False, racks: bool = False) -> tuple[GpuNode, ...]:
    """Nodes in name order; with ``mig``, some A100 nodes are MIG nodes; with ``racks``, nodes in racks
    of a few nodes and two zones (some without a rack label)."""
    out = []
    per_rack = draw(st.integers(1, 4)) if racks else 0
    for i in range(draw(st.integers(1, 16) | st.integers(8, 16))):
        model = draw(st.sampled_from((MODELS[0], MODELS[0], MODELS[0], MODELS[1], None)))
        labels = None
        if racks:
            labels = {ZONE: f"z{i // (2 * per_rack) % 2}"}
            if draw(st.integers(0, 9)):
                labels[RACK] = f"r{i // per_rack}"
        out.append(
            node(
                f"n{i:02d}",
                model,
                draw(st.sampled_from((1, 2, 4, 8, 8))),
                cpu=draw(st.sampled_from((8000, 32_000, 64_000))),
                mem=draw(st.sampled_from((16_000, 64_000))),
                labels=labels,
                cordoned=draw(st.integers(0, 9)) == 0,
                mig=mig and model == "A100-80GB" and draw(st.booleans()),
                gpu_memory_gib=80 if model == "A100-80GB" else 48 if model else 0,
            )
        )
    return tuple(out)


@st.composite
def loaded_clusters(draw: Any, mig: bool = False, racks: bool = False) -> Cluster:
    """A :class:`Cluster` whose free capacity was set at random (over-committed CPU/memory included);
    ``racks``: see :func:`gpu_nodes`."""
    cluster = Cluster(Snapshot(draw(gpu_nodes(mig, racks)), (), (), ()))
    for i in range(cluster.n):
        for d in range(int(cluster.gpu_count[i])):
            if cluster.mig_node[i]:
                cluster.mig_mask[i, d] = draw(st.sampled_from((0, 0, 0b1, 0b11, 0b1111, 0b110000, 0xFF)))
                cluster.mig_compute[i, d] = min(7, int(cluster.mig_mask[i, d]).bit_count())
            else:
                cluster.dev_free[i, d] = 1000 - draw(st.sampled_from(SHARES))
        cluster.cpu_free[i] = cluster.cpu_total[i] - draw(st.sampled_from((0, 0, 4000, 9000)))
        cluster.mem_free[i] = cluster.mem_total[i] - draw(st.sampled_from((0, 0, 8000, 20_000)))
    cluster.refresh_all()
    return cluster


@st.composite
def shapes(draw: Any, cluster: Cluster, mig: bool = False) -> Shape:
    """A replica shape on one of the cluster's models (or CPU-only): whole, fraction, CPU-only, MIG."""
    kinds = ("whole", "whole", "fraction", "cpu", *(("mig",) if mig else ()))
    kind = draw(st.sampled_from(kinds))
    cpu = draw(st.sampled_from((0, 1000, 1000, 8000, 30_000)))
    memory = draw(st.sampled_from((0, 1000, 1000, 30_000)))
    if kind == "cpu":
        return Shape(None, cpu_milli=cpu, memory_mib=memory)
    model = draw(st.sampled_from(cluster.models or MODELS))
    if kind == "whole":
        return Shape(model, gpus=draw(st.sampled_from((1, 2, 2, 3, 4))), cpu_milli=cpu, memory_mib=memory)
    if kind == "fraction":
        return Shape(model, milli=draw(st.sampled_from((100, 250, 500, 700))), cpu_milli=cpu, memory_mib=memory)
    geometry = mig_geometry(draw(st.sampled_from(PROFILES)), 80)
    return Shape("A100-80GB", mig=geometry, cpu_milli=cpu, memory_mib=memory)
