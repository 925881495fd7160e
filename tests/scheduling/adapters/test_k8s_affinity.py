"""A job's placement rules in Kubernetes' words: what the API server would refuse is refused with the
field and the path inside it, what it accepts becomes the engine's values, and the pod carries them."""

from __future__ import annotations

import pytest

from scheduling.adapters.k8s.affinity import RulesError, describe, parse_rules, pod_fields
from scheduling.engine.model import (
    AntiAffinityTerm,
    NodeSelectorTerm,
    PlacementRules,
    PreferredTerm,
    Requirement,
    SpreadConstraint,
)

REQ = "requiredDuringSchedulingIgnoredDuringExecution"
PREF = "preferredDuringSchedulingIgnoredDuringExecution"


def required(*expressions: dict, fields: tuple[dict, ...] = ()) -> dict:
    term: dict = {"matchExpressions": list(expressions)}
    if fields:
        term["matchFields"] = list(fields)
    return {"nodeAffinity": {REQ: {"nodeSelectorTerms": [term]}}}


def expr(key: str, operator: str, *values: str) -> dict:
    return {"key": key, "operator": operator, "values": list(values)}


def test_the_seeds_example_becomes_the_engines_rules():
    affinity = {
        "nodeAffinity": {
            REQ: {"nodeSelectorTerms": [{"matchExpressions": [expr("gpu-type", "In", "a100", "h100")]}]},
            PREF: [{"weight": 1, "preference": {"matchExpressions": [expr("gpu-count", "Gt", "4")]}}],
        },
        "podAntiAffinity": {
            REQ: [{"topologyKey": "kubernetes.io/hostname"}],
            PREF: [{"weight": 50, "podAffinityTerm": {"topologyKey": "topology.kubernetes.io/zone"}}],
        },
    }
    spread = [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule"}]
    assert parse_rules(affinity, spread, "rack") == PlacementRules(
        required_terms=(NodeSelectorTerm((Requirement("gpu-type", "In", ("a100", "h100")),)),),
        preferred_terms=(PreferredTerm(1, NodeSelectorTerm((Requirement("gpu-count", "Gt", ("4",)),))),),
        anti_affinity=(AntiAffinityTerm("kubernetes.io/hostname"), AntiAffinityTerm("topology.kubernetes.io/zone", 50)),
        spread=(SpreadConstraint(1, "topology.kubernetes.io/zone"),),
        required_topology="rack",
    )


def test_no_rules_is_none():
    assert parse_rules({}, [], "") is None
    assert parse_rules(None, None, None) is None


@pytest.mark.parametrize(
    ("affinity", "spread", "level", "field", "message"),
    [
        # Kubernetes' ValidateNodeSelector and ValidateNodeSelectorRequirement
        (
            {"nodeAffinity": {REQ: {"nodeSelectorTerms": []}}},
            None,
            "",
            "affinity",
            f"nodeAffinity.{REQ}.nodeSelectorTerms: at least 1 entry",
        ),
        (
            required(expr("gpu-type", "In")),
            None,
            "",
            "affinity",
            "matchExpressions[0].values: In needs at least one value",
        ),
        (required(expr("gpu-type", "Exists", "x")), None, "", "affinity", "values: Exists takes no values"),
        (
            required(expr("gpu-count", "Gt", "4", "5")),
            None,
            "",
            "affinity",
            "values: Gt takes exactly one value (got 2)",
        ),
        (required(expr("gpu-count", "Lt", "four")), None, "", "affinity", "Lt compares integers: 'four' is not one"),
        (
            required(expr("gpu-type", "Equals", "x")),
            None,
            "",
            "affinity",
            "matchExpressions[0].operator: operator 'Equals' is not one of",
        ),
        (
            required(expr("bad key!", "Exists")),
            None,
            "",
            "affinity",
            "matchExpressions[0].key: 'bad key!' is not a label key",
        ),
        (required(expr("gpu-type", "In", "A100 ")), None, "", "affinity", "values[0]: 'A100 ' is not a label value"),
        (
            required(fields=({"key": "metadata.uid", "operator": "In", "values": ["x"]},)),
            None,
            "",
            "affinity",
            "matchFields[0].key: 'metadata.uid' is not a node field",
        ),
        (
            required(fields=(expr("metadata.name", "In", "a", "b"),)),
            None,
            "",
            "affinity",
            "In on a field takes exactly one value (got 2)",
        ),
        (
            required(fields=(expr("metadata.name", "Exists"),)),
            None,
            "",
            "affinity",
            "operator 'Exists' is not In or NotIn",
        ),
        (
            {"nodeAffinity": {PREF: [{"weight": 0, "preference": {}}]}},
            None,
            "",
            "affinity",
            "weight: must be between 1 and 100 (got 0)",
        ),
        (
            {"nodeAffinity": {PREF: [{"weight": 101, "preference": {}}]}},
            None,
            "",
            "affinity",
            "must be between 1 and 100 (got 101)",
        ),
        (
            {"nodeAffinity": {PREF: [{"weight": "5", "preference": {}}]}},
            None,
            "",
            "affinity",
            "expected an integer, got '5'",
        ),
        # what the portal does not take
        (
            {"podAffinity": {}},
            None,
            "",
            "affinity",
            "pod affinity is not supported: to keep a gang together use required_topology",
        ),
        (
            {"podAntiAffinity": {REQ: [{"topologyKey": "zone", "labelSelector": {}}]}},
            None,
            "",
            "affinity",
            "labelSelector: the portal applies it between the job's own replicas",
        ),
        ({"podAntiAffinity": {REQ: [{}]}}, None, "", "affinity", "topologyKey: required"),
        (
            {"nodeAfinity": {}},
            None,
            "",
            "affinity",
            "nodeAfinity: unknown field (known: nodeAffinity, podAntiAffinity)",
        ),
        ([1], None, "", "affinity", "expected an object, got list"),
        # bounds, so no tenant's rules slow the cycle down
        (
            {"nodeAffinity": {REQ: {"nodeSelectorTerms": [{"matchExpressions": [expr("k", "Exists")]}] * 9}}},
            None,
            "",
            "affinity",
            "nodeSelectorTerms: at most 8 entries (got 9)",
        ),
        (
            required(*[expr(f"k{i}", "Exists") for i in range(9)]),
            None,
            "",
            "affinity",
            "matchExpressions: at most 8 entries (got 9)",
        ),
        (
            required(expr("k", "In", *[f"v{i}" for i in range(17)])),
            None,
            "",
            "affinity",
            "values: at most 16 entries (got 17)",
        ),
        # Kubernetes' ValidateTopologySpreadConstraints
        (
            None,
            [{"maxSkew": 0, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}],
            "",
            "topology_spread_constraints",
            "[0].maxSkew: must be between 1 and 1024 (got 0)",
        ),
        (
            None,
            [{"maxSkew": 1, "topologyKey": "", "whenUnsatisfiable": "DoNotSchedule"}],
            "",
            "topology_spread_constraints",
            "[0].topologyKey: '' is not a label key",
        ),
        (
            None,
            [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "Never"}],
            "",
            "topology_spread_constraints",
            "'Never' is not DoNotSchedule or ScheduleAnyway",
        ),
        (
            None,
            [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway", "minDomains": 2}],
            "",
            "topology_spread_constraints",
            "[0].minDomains: can only be set when whenUnsatisfiable is DoNotSchedule",
        ),
        (
            None,
            [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule", "minDomains": 0}],
            "",
            "topology_spread_constraints",
            "[0].minDomains: must be between 1",
        ),
        (
            None,
            [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule", "nodeTaintsPolicy": "Always"}],
            "",
            "topology_spread_constraints",
            "[0].nodeTaintsPolicy: 'Always' is not one of Honor, Ignore",
        ),
        (
            None,
            [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}] * 2,
            "",
            "topology_spread_constraints",
            "[1]: a second constraint on zone with DoNotSchedule",
        ),
        (
            None,
            [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {}}],
            "",
            "topology_spread_constraints",
            "[0].labelSelector: the portal applies it between the job's own replicas",
        ),
        (None, {"maxSkew": 1}, "", "topology_spread_constraints", "expected a list, got dict"),
        (None, None, "one rack", "required_topology", "'one rack' is not node, rack, zone, nvlink or a node label key"),
    ],
)
def test_what_kubernetes_would_refuse_is_refused_naming_the_field_and_path(affinity, spread, level, field, message):
    with pytest.raises(RulesError) as caught:
        parse_rules(affinity, spread, level)
    assert caught.value.field == field
    assert message in caught.value.message


def test_kubernetes_accepts_an_empty_term_which_then_matches_nothing():
    rules = parse_rules({"nodeAffinity": {REQ: {"nodeSelectorTerms": [{}]}}}, None, "")
    assert rules == PlacementRules(required_terms=(NodeSelectorTerm(),))


def test_the_pod_carries_the_rules_with_the_jobs_own_pods_as_the_selector():
    rules = PlacementRules(
        required_terms=(
            NodeSelectorTerm(
                (Requirement("gpu-type", "NotIn", ("V100",)),), (Requirement("metadata.name", "In", ("n1",)),)
            ),
        ),
        anti_affinity=(AntiAffinityTerm("zone", 10),),
        spread=(SpreadConstraint(2, "zone", "DoNotSchedule", min_domains=3),),
        required_topology="rack",
    )
    own = {"matchLabels": {"gpu-portal.io/job-id": "7"}}
    assert pod_fields(rules, 7) == {
        "affinity": {
            "nodeAffinity": {
                REQ: {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [{"key": "gpu-type", "operator": "NotIn", "values": ["V100"]}],
                            "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}],
                        }
                    ]
                }
            },
            "podAntiAffinity": {
                PREF: [{"weight": 10, "podAffinityTerm": {"topologyKey": "zone", "labelSelector": own}}]
            },
        },
        "topologySpreadConstraints": [
            {
                "maxSkew": 2,
                "topologyKey": "zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": own,
                "nodeAffinityPolicy": "Honor",
                "nodeTaintsPolicy": "Ignore",
                "minDomains": 3,
            }
        ],
    }
    assert pod_fields(None, 7) == {}
    assert pod_fields(PlacementRules(required_topology="rack"), 7) == {}


def test_the_rules_read_as_sentences_on_the_job_page():
    rules = PlacementRules(
        required_terms=(NodeSelectorTerm((Requirement("gpu-type", "In", ("A100", "H100")),)),),
        preferred_terms=(PreferredTerm(5, NodeSelectorTerm((Requirement("gpu-count", "Gt", ("4",)),))),),
        anti_affinity=(AntiAffinityTerm("kubernetes.io/hostname"), AntiAffinityTerm("zone", 10)),
        spread=(SpreadConstraint(1, "zone", "DoNotSchedule", min_domains=3, node_taints_policy="Honor"),),
        required_topology="rack",
    )
    assert describe(rules, {"rack": "topology.kubernetes.io/rack"}) == [
        ("Node affinity (required)", "gpu-type In [A100, H100]"),
        ("Node affinity (preferred)", "gpu-count Gt 4 (weight 5)"),
        (
            "Pod anti-affinity",
            (
                "required: at most one replica per kubernetes.io/hostname; "
                "preferred (weight 10): replicas in as few shared zone domains as possible"
            ),
        ),
        (
            "Topology spread",
            "maxSkew 1 over zone, DoNotSchedule, minDomains 3 (nodeAffinityPolicy Honor, nodeTaintsPolicy Honor)",
        ),
        ("All replicas in", "one rack (topology.kubernetes.io/rack)"),
    ]
    assert describe(PlacementRules(required_topology="example.com/pod"), {}) == [
        ("All replicas in", "one example.com/pod domain")
    ]
    assert describe(None, {}) == []
