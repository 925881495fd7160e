"""The fit rule (scheduling.engine.fit): its vectorised and scalar forms agree, and the device
picker finds devices wherever the rule says a replica fits."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.engine import fit
from scheduling.engine.scorers import pick_devices

from .builders import node, snapshot
from .strategies import loaded_clusters, shapes

SETTINGS = settings(max_examples=100, deadline=None)


@SETTINGS
@given(data=st.data())
def test_the_vectorised_and_the_scalar_rule_agree_on_every_node(data: Any) -> None:
    cluster = data.draw(loaded_clusters(mig=True))
    shape = data.draw(shapes(cluster, mig=True))
    every = np.arange(cluster.n)
    vector = fit.fits(cluster, shape, every)
    assert vector.tolist() == [fit.fits_node(cluster, shape, i) for i in range(cluster.n)]
    assert fit.fits(cluster, shape, slice(0, cluster.n)).tolist() == vector.tolist()
    within = np.array([i % 2 == 0 for i in range(cluster.n)])
    assert fit.fits(cluster, shape, slice(0, cluster.n), within=within).tolist() == (vector & within).tolist()
    assert ((fit.misfit(cluster, shape, every) == fit.FITS) == vector).all()


@SETTINGS
@given(data=st.data())
def test_a_node_fits_exactly_when_it_has_capacity_for_one_more_replica(data: Any) -> None:
    cluster = data.draw(loaded_clusters(mig=True))
    shape = data.draw(shapes(cluster, mig=True))
    # MIG mode is a static filter: fractions and whole GPUs never go on MIG nodes, slices only there.
    nodes = np.flatnonzero((cluster.mig_node == (shape.kind == "mig")) | (shape.kind == "cpu"))
    assert ((fit.replica_capacity(cluster, shape, nodes) > 0) == fit.fits(cluster, shape, nodes)).all()


@SETTINGS
@given(data=st.data())
def test_the_device_picker_finds_devices_wherever_the_rule_says_a_replica_fits(data: Any) -> None:
    cluster = data.draw(loaded_clusters(mig=True))
    shape = data.draw(shapes(cluster, mig=True))
    for i in np.flatnonzero(fit.fits(cluster, shape, np.arange(cluster.n))).tolist():
        if shape.kind == "mig" and not cluster.mig_node[i]:
            continue  # MIG mode is a static filter, not part of the fit rule
        devices, slot = pick_devices(cluster, i, shape)
        assert len(devices) == (shape.gpus or (0 if shape.kind == "cpu" else 1))
        assert (slot is not None) == (shape.kind == "mig")


def test_a_whole_gpu_replica_needs_that_many_fully_free_devices_on_one_node() -> None:
    from scheduling.engine.capacity import Cluster
    from scheduling.engine.fit import Shape
    from scheduling.engine.model import ReplicaPlacement

    cluster = Cluster(snapshot([node("a", gpus=2), node("b", gpus=2)], [], [], []))
    cluster.apply(ReplicaPlacement("a", (0,), 500), 1)
    cluster.apply(ReplicaPlacement("b", (1,), 1000), 1)
    two, half = Shape("A100-80GB", gpus=2), Shape("A100-80GB", milli=500)
    assert fit.fits(cluster, two, np.arange(2)).tolist() == [False, False]
    assert fit.fits(cluster, half, np.arange(2)).tolist() == [True, True]
    assert fit.replica_capacity(cluster, half, np.arange(2)).tolist() == [3, 2]


def test_contiguity_finds_a_block_of_consecutive_free_devices() -> None:
    from scheduling.engine.capacity import Cluster
    from scheduling.engine.model import ReplicaPlacement

    cluster = Cluster(snapshot([node("a", gpus=4), node("b", gpus=4)], [], [], []))
    cluster.apply(ReplicaPlacement("a", (1,), 1000), 1)  # a: 0 _ 2 3
    cluster.apply(ReplicaPlacement("b", (0, 2), 1000), 1)  # b: _ 1 _ 3
    assert fit.contiguous(cluster, 2, np.arange(2)).tolist() == [True, False]
    assert fit.contiguous(cluster, 3, np.arange(2)).tolist() == [False, False]


def test_contiguity_after_any_changes_is_a_block_of_that_many_free_devices() -> None:
    """Random takes and give-backs of whole GPUs and fractions on an 8-GPU node, staged and bulk-loaded:
    ``contiguous`` says yes exactly where some g consecutive devices are all untouched."""
    import random

    from scheduling.engine.capacity import Cluster, Statement
    from scheduling.engine.model import ReplicaPlacement

    rng = random.Random(7)
    for _ in range(200):
        cluster = Cluster(snapshot([node("a", gpus=8)], [], [], []))
        stmt = Statement(cluster)
        held: list[ReplicaPlacement] = []
        for _ in range(rng.randrange(1, 6)):
            devices = tuple(sorted(rng.sample(range(8), rng.randrange(1, 4))))
            placement = ReplicaPlacement("a", devices, rng.choice((1000, 250)))
            stmt.take(placement)
            held.append(placement)
        if rng.random() < 0.5:
            stmt.give_back(held.pop(rng.randrange(len(held))))
        if rng.random() < 0.5:  # the same state loaded in bulk
            cluster = Cluster(snapshot([node("a", gpus=8)], [], [], []))
            for placement in held:
                cluster.apply(placement, 1, refresh=False)
            cluster.refresh_all()
        busy = {d for placement in held for d in placement.gpu_indices}
        for g in range(1, 9):
            block = any(all(d not in busy for d in range(s, s + g)) for s in range(9 - g))
            assert fit.contiguous(cluster, g, np.arange(1)).tolist() == [block], (held, g)


@SETTINGS
@given(data=st.data())
def test_the_mig_slice_picked_is_the_least_costly_free_start_by_the_rule(data: Any) -> None:
    # ``scorers.pick_devices`` on a MIG node (kept per device state, ``mig.best_start``) against the
    # rule written out over every free (device, start): least loss, then the busiest device, then the
    # lowest device and start.
    from scheduling.engine.mig import best_start, free_starts, slot_loss

    cluster = data.draw(loaded_clusters(mig=True))
    shape = data.draw(shapes(cluster, mig=True))
    if shape.mig is None:
        return
    for i in np.flatnonzero(cluster.mig_node & ~cluster.mig_fixed).tolist():
        options = []
        for d in range(int(cluster.gpu_count[i])):
            mask, compute = int(cluster.mig_mask[i, d]), int(cluster.mig_compute[i, d])
            mine = [(slot_loss(mask, compute, shape.mig, s), s) for s in free_starts(mask, compute, shape.mig)]
            assert best_start(mask, compute, shape.mig) == min(mine, default=None)
            options += [(loss, -mask.bit_count(), d, start) for loss, start in mine]
        expected = ((min(options)[2],), min(options)[3]) if options else ((), None)
        assert pick_devices(cluster, i, shape) == expected


def test_a_shape_pickles_without_its_hash_and_hashes_as_its_fields_again() -> None:
    import pickle
    from dataclasses import replace

    from scheduling.engine.fit import Shape
    from scheduling.engine.mig import mig_geometry

    for shape in (Shape("A100-80GB", gpus=2, cpu_milli=8), Shape("A100-80GB", mig=mig_geometry("1g.10gb", 80))):
        assert shape.__getstate__() == tuple(_fields(shape).values())  # no hash: another process's differs
        back = pickle.loads(pickle.dumps(shape))
        assert back == shape
        assert hash(back) == hash(shape)
        assert back.kind == shape.kind
        assert hash(replace(shape, cpu_milli=1)) == hash(Shape(**{**_fields(shape), "cpu_milli": 1}))


def _fields(shape: Any) -> dict[str, Any]:
    return {k: getattr(shape, k) for k in ("gpu_model", "gpus", "milli", "mig", "cpu_milli", "memory_mib")}
