"""Tolerations by Kubernetes' ``ToleratesTaint`` (effect, then key, then operator), the
TaintToleration filter and score, and the platform's allow-list applied by the engine."""

from __future__ import annotations

import pytest

from scheduling.engine.cycle import run_cycle
from scheduling.engine.model import Policy, Taint, Toleration, TolerationGrant
from scheduling.engine.taints import tolerates, toleration_allowed, untolerated_soft

from .builders import admitted_ids, cq, job, lq, node, reason_of, snapshot

SPOT = Taint("spot", "true", "NoSchedule")

# (toleration, taint, tolerated) — Kubernetes' rules, row by row.
RULES = [
    (Toleration("spot", "Equal", "true", "NoSchedule"), SPOT, True),
    (Toleration("spot", "Equal", "false", "NoSchedule"), SPOT, False),  # Equal compares values
    (Toleration("spot", "", "true", ""), SPOT, True),  # no operator means Equal
    (Toleration("spot", "Exists", "", ""), SPOT, True),  # no effect: every effect
    (Toleration("spot", "Exists", "", "NoExecute"), SPOT, False),  # another effect
    (Toleration("spot", "Exists", "", "PreferNoSchedule"), SPOT, False),
    (Toleration("other", "Exists", "", ""), SPOT, False),  # another key
    (Toleration("", "Exists", "", ""), SPOT, True),  # no key + Exists: every taint
    (Toleration("", "Exists", "", "NoSchedule"), SPOT, True),
    (Toleration("", "Exists", "", "NoExecute"), SPOT, False),
    (Toleration("", "Equal", "true", ""), SPOT, True),  # no key matches every key, then the value
    (Toleration("", "Equal", "false", ""), SPOT, False),
    (Toleration("spot", "Gt", "1", ""), SPOT, False),  # an unknown operator tolerates nothing
    (Toleration("spot", "Equal", "", ""), Taint("spot", "", "NoSchedule"), True),  # empty values are equal
]


@pytest.mark.parametrize(("toleration", "taint", "expected"), RULES)
def test_a_toleration_tolerates_a_taint_by_kubernetes_rules(toleration, taint, expected):
    assert tolerates(toleration, taint) is expected


NOW = 1000.0
QUEUES = ([cq("q", {"A100-80GB": 100})], [lq("a", "q", team="vision")])


def cycle(nodes, jobs, **kwargs):
    return run_cycle(snapshot(nodes, *QUEUES, jobs, **kwargs), Policy(), NOW)


def test_no_execute_taints_filter_like_no_schedule_and_prefer_no_schedule_only_scores():
    nodes = [
        node("evict", taints=(Taint("maint", "", "NoExecute"),)),
        node("soft", taints=(Taint("x", "", "PreferNoSchedule"),)),
    ]
    plan = cycle(nodes, [job("j", "a", gpu=1, team="vision")])
    assert [p.node for p in plan.admissions[0].placements] == ["soft"]


def test_the_node_with_fewer_untolerated_soft_taints_wins():
    soft = Taint("a", "", "PreferNoSchedule")
    nodes = [
        node("two", taints=(soft, Taint("b", "", "PreferNoSchedule"))),
        node("one", taints=(soft,)),
        node("tolerated", taints=(Taint("c", "", "PreferNoSchedule"),)),
    ]
    tolerations = (Toleration("c", "Exists"),)
    assert untolerated_soft(tolerations, nodes[0].taints) == 2
    plan = cycle(nodes, [job("j", "a", gpu=1, team="vision", tolerations=tolerations)])
    assert [p.node for p in plan.admissions[0].placements] == ["tolerated"]
    plan = cycle(nodes[:2], [job("j", "a", gpu=1, team="vision")])
    assert [p.node for p in plan.admissions[0].placements] == ["one"]


GRANTS = [
    (TolerationGrant("spot"), Toleration("spot", "Exists"), True),
    (TolerationGrant("spot"), Toleration("spot", "Equal", "yes"), True),
    (TolerationGrant("spot"), Toleration("other", "Exists"), False),
    (TolerationGrant("spot", "yes"), Toleration("spot", "Equal", "yes"), True),
    (TolerationGrant("spot", "yes"), Toleration("spot", "Exists"), False),  # would tolerate any value
    (TolerationGrant("spot", "", "NoSchedule"), Toleration("spot", "Exists", "", "NoSchedule"), True),
    (TolerationGrant("spot", "", "NoSchedule"), Toleration("spot", "Exists"), False),  # every effect
    (TolerationGrant("spot"), Toleration("", "Exists"), False),  # every key needs `all`
    (TolerationGrant(all=True), Toleration("", "Exists"), True),
]


@pytest.mark.parametrize(("grant", "toleration", "allowed"), GRANTS)
def test_a_grant_covers_only_what_it_allows(grant, toleration, allowed):
    assert toleration_allowed(toleration, [grant]) is allowed


def test_a_toleration_the_team_was_not_granted_does_not_count_in_the_engine():
    nodes = [node("dedicated", taints=(Taint("dedicated", "nlp"),))]
    sneaky = job("j", "a", gpu=1, team="vision", tolerations=(Toleration("", "Exists"),))
    # Without an allow-list in the snapshot (replays, the simulator) every toleration counts.
    assert admitted_ids(cycle(nodes, [sneaky])) == ["j"]
    # With it, vision's grants (spot only) do not cover the wildcard: the taint is not tolerated.
    plan = cycle(nodes, [sneaky], toleration_grants=(("vision", (TolerationGrant("spot"),)),))
    assert admitted_ids(plan) == []
    assert reason_of(plan, "j") == (
        "placement: never fits as configured: none of the 1 A100-80GB node passes the job's filters: "
        "1 untolerated taint"
    )
    # A team missing from the allow-list has no grants at all.
    assert admitted_ids(cycle(nodes, [sneaky], toleration_grants=())) == []
    granted = (("vision", (TolerationGrant("dedicated", "nlp"),)),)
    ok = job("k", "a", gpu=1, team="vision", tolerations=(Toleration("dedicated", "Equal", "nlp"),))
    assert admitted_ids(cycle(nodes, [ok], toleration_grants=granted)) == ["k"]


def test_the_recent_submissions_the_forecast_expects_again_keep_only_granted_tolerations():
    from dataclasses import replace

    from scheduling.engine.model import WorkloadState
    from scheduling.engine.taints import granted_snapshot

    wildcard = (Toleration("", "Exists"),)
    done = replace(job("r", "a", gpu=1, team="vision", tolerations=wildcard), state=WorkloadState.RUNNING)
    snap = replace(
        snapshot([node("n")], *QUEUES, [], toleration_grants=(("vision", (TolerationGrant("spot"),)),)),
        recent=(done,),
    )
    # Running, but expected again as a pending job: its wildcard is not vision's to use.
    assert granted_snapshot(snap).recent[0].tolerations == ()
    assert granted_snapshot(replace(snap, toleration_grants=None)).recent[0].tolerations == wildcard
