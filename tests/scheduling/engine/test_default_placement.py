"""The default placement policy (``portal``, fragmentation-aware) against bin-packing, on a cluster
worked by hand.

Two 8-GPU nodes. ``a`` runs a 5-GPU job on devices 0-4 and a half-GPU job on device 5; ``b`` runs a
6-GPU job on devices 0-5. A half-GPU job arrives.

* Bin-packing takes the fullest node (``b``: 2 of 8 GPUs free, against 2.5 on ``a``) and a fresh device
  there: the half-used device 5 on ``a`` stays half used, and 3 whole GPUs are left free (``a``: 6, 7;
  ``b``: 7).
* The half-GPU job fits on ``a``'s device 5 and completes it, leaving 4 whole GPUs free (``a``: 6, 7;
  ``b``: 6, 7): the most any placement can leave, since the job needs some device and only device 5
  is not whole.

The free whole GPUs are counted here from the placements themselves, not from the engine's arrays.
"""

from __future__ import annotations

import pytest

from scheduling.engine.cycle import run_cycle
from scheduling.engine.model import Policy

from .builders import cq, job, lq, node, running, snapshot

NOW = 1000.0


def cluster_with_a_half_used_device():
    nodes = [node("a", gpus=8), node("b", gpus=8)]
    workloads = [
        running("five", "lq", [("a", (0, 1, 2, 3, 4))]),
        running("half-on-a", "lq", [("a", (5,))], gpu_milli=500),
        running("six", "lq", [("b", (0, 1, 2, 3, 4, 5))]),
        job("new-half", "lq", milli=500, created=1),
    ]
    return snapshot(nodes, [cq("q", {"A100-80GB": 100})], [lq("lq", "q")], workloads)


def whole_free_gpus(snap, plan) -> int:
    """Devices nobody holds any share of, from the running placements and the plan's admissions."""
    used: dict[tuple[str, int], int] = {}
    held = [p for w in snap.workloads for p in w.placements]
    held += [p for a in plan.admissions for p in a.placements]
    for p in held:
        for d in p.gpu_indices:
            used[(p.node, d)] = used.get((p.node, d), 0) + p.gpu_milli
    return sum(1 for n in snap.nodes for d in range(n.gpu_count) if used.get((n.name, d), 0) == 0)


@pytest.mark.parametrize(
    ("policy", "placed_on", "whole_free"),
    [
        (Policy(placement="binpack"), ("b", (6,)), 3),  # strands a fresh device on the fuller node
        (Policy(), ("a", (5,)), 4),  # the default completes the half-used device
        (Policy(placement="portal"), ("a", (5,)), 4),
        (Policy(placement="fgd"), ("a", (5,)), 4),
    ],
)
def test_a_fraction_completes_a_half_used_device_instead_of_opening_a_fresh_one(policy, placed_on, whole_free):
    snap = cluster_with_a_half_used_device()
    plan = run_cycle(snap, policy, NOW)
    (admission,) = plan.admissions
    (placement,) = admission.placements
    assert (placement.node, placement.gpu_indices) == placed_on
    assert whole_free_gpus(snap, plan) == whole_free


def test_the_engine_default_is_the_fragmentation_aware_policy():
    assert Policy().placement == "portal"
