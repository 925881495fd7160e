"""Model pressure (scheduling.engine.frag.pressure) and portal's use of it, worked by hand from the rule
in the module docstring."""

from __future__ import annotations

import numpy as np
import pytest

from scheduling.engine.frag import Choice, NodeArrays, PodShape, TracePlacer, TypicalPod
from scheduling.engine.frag.pressure import demand_share, pressure_levels
from scheduling.engine.frag.workload import TypicalArrays


def test_demand_share_splits_a_multi_model_constraint_by_capacity():
    typical = (
        TypicalPod(1000, 1000, 1, (), 0.5),  # 500 milli per pod, anywhere
        TypicalPod(1000, 1000, 1, ("A",), 0.25),  # 250 on A
        TypicalPod(1000, 1000, 2, ("A", "B"), 0.25),  # 500, split 2:6 by capacity: 125 on A, 375 on B
    )
    table = TypicalArrays.build(typical, ("A", "B"))
    share = demand_share(table, np.array([2.0, 6.0, 0.0]))
    # total demand 500 + 250 + 500 = 1250; A: 250 + 125 = 375; B: 375; the CPU-only row: nothing.
    assert share == pytest.approx([0.3, 0.3, 0.0])


def test_no_constraint_means_no_pressure():
    table = TypicalArrays.build((TypicalPod(1000, 500, 1, (), 1.0),), ("A", "B"))
    assert not demand_share(table, np.array([2.0, 6.0, 0.0])).any()


def test_pressure_levels_from_share_and_free_capacity():
    # free 4000 in all; slack 0.8. A: P = 0.3 * 4000 / 1000 = 1.2, excess 0.4 -> 0.4 / 1.4 = 0.286 -> 29;
    # B: P = 0.1 * 4000 / 3000 = 0.133, within the slack -> 0; no share -> 0; a full model with a share -> 100.
    levels = pressure_levels(np.array([0.3, 0.1, 0.0, 0.2]), np.array([1000.0, 3000.0, 0.0, 0.0]))
    assert levels.tolist() == [29, 0, 0, 100]


def test_portal_sends_an_unconstrained_pod_away_from_the_model_constrained_pods_need():
    # Typical: an unconstrained 2-GPU pod (0.5), a 1-GPU pod only A can serve (0.5). Node "a" (model A)
    # has 1 of 2 GPUs free, node "b" (model B) 2 free. A 1-GPU unconstrained pod:
    #   FGD on a: frag 1000 * 0.5 (2-GPU pod cannot fit) = 500 -> 0 after: +500 -> int(100 sigmoid(0.5)) = 62
    #   FGD on b: frag 2000 * 0.5 (A only) = 1000 -> 1000 * 0.5 + 1000 * 0.5 = 1000 after: 0 -> 50
    # so FGD picks a. Pressure: demand 1000 + 500, s_A = 500 / 1500; free 1000 on A, 2000 on B:
    # P_A = 1/3 * 3000 / 1000 = 1.0, excess 0.2 -> 0.2 / 1.2 -> level 17; P_B = 0 -> level 0: portal picks b.
    typical = (TypicalPod(1000, 1000, 2, (), 0.5), TypicalPod(1000, 1000, 1, ("A",), 0.5))
    nodes = NodeArrays.of([("a", "A", 2, 32000, 65536), ("b", "B", 2, 32000, 65536)])
    pod = PodShape(1000, 0, 1000, 1)
    picks = {}
    for policy in ("fgd", "portal"):
        placer = TracePlacer(nodes, policy, typical=typical, node_rank=np.arange(2))
        placer.bind(PodShape(1000, 0, 1000, 1), Choice(0, (0,)))
        choice = placer.select(pod)
        assert choice is not None
        picks[policy] = choice.node
    assert picks == {"fgd": 0, "portal": 1}
    table = TypicalArrays.build(typical, nodes.models)
    share = demand_share(table, np.array([2.0, 2.0, 0.0]))
    assert share == pytest.approx([500 / 1500, 0.0, 0.0])
    assert pressure_levels(share, np.array([1000.0, 2000.0, 0.0])).tolist() == [17, 0, 0]


def test_within_the_slack_fgd_decides():
    # Same cluster, the A-only pod at 0.2 (2-GPU pod 0.8): s_A = 200 / 1800, P_A = 0.111 * 3000 / 1000 =
    # 0.333 <= 0.8: level 0 on both models, so portal follows FGD. FGD on a: 1000 * 0.8 = 800 -> 0: +800
    # -> 68; on b: 2000 * 0.2 = 400 -> 1000 * 0.8 + 1000 * 0.2 = 1000: -600 -> 35.
    typical = (TypicalPod(1000, 1000, 2, (), 0.8), TypicalPod(1000, 1000, 1, ("A",), 0.2))
    nodes = NodeArrays.of([("a", "A", 2, 32000, 65536), ("b", "B", 2, 32000, 65536)])
    placer = TracePlacer(nodes, "portal", typical=typical, node_rank=np.arange(2))
    placer.bind(PodShape(1000, 0, 1000, 1), Choice(0, (0,)))
    choice = placer.select(PodShape(1000, 0, 1000, 1))
    assert choice is not None
    assert choice.node == 0


def test_a_constrained_pod_still_goes_to_its_model():
    typical = (TypicalPod(1000, 1000, 2, (), 0.8), TypicalPod(1000, 1000, 1, ("A",), 0.2))
    nodes = NodeArrays.of([("a", "A", 2, 32000, 65536), ("b", "B", 2, 32000, 65536)])
    placer = TracePlacer(nodes, "portal", typical=typical, node_rank=np.arange(2))
    choice = placer.select(PodShape(1000, 0, 1000, 1, ("A",)))
    assert choice is not None
    assert choice.node == 0
