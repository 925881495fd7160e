"""Node affinity, written from Kubernetes' rules (``labels.Requirement.Matches``, ``component-helpers``
``nodeaffinity``), not from the engine's output: each row says what a kube-scheduler would do."""

from __future__ import annotations

import numpy as np
import pytest

from scheduling.engine.affinity import LabelIndex, by_max, parse_int64, terms_text
from scheduling.engine.cycle import run_cycle
from scheduling.engine.model import NodeSelectorTerm, PlacementRules, Policy, PreferredTerm, Requirement, labels_of

from .builders import admitted_ids, cq, job, lq, node, pending_info, reason_of, running, snapshot

NOW = 1000.0


def req(key: str, operator: str, *values: str) -> Requirement:
    return Requirement(key, operator, tuple(values))


def term(*reqs: Requirement, fields: tuple[Requirement, ...] = ()) -> NodeSelectorTerm:
    return NodeSelectorTerm(tuple(reqs), fields)


def matches(labels: dict[str, str], requirement: Requirement) -> bool:
    index = LabelIndex([node("n1", labels=labels)])
    return bool(index.requirement(requirement)[0])


GPU_TYPE = "gpu-type"

# (node labels, requirement, does the node match) — Kubernetes' table, operator by operator.
REQUIREMENTS = [
    # In: the label exists and its value is listed (case-sensitive, exact).
    ({GPU_TYPE: "A100"}, req(GPU_TYPE, "In", "A100", "H100"), True),
    ({GPU_TYPE: "H100"}, req(GPU_TYPE, "In", "A100", "H100"), True),
    ({GPU_TYPE: "V100"}, req(GPU_TYPE, "In", "A100", "H100"), False),
    ({GPU_TYPE: "a100"}, req(GPU_TYPE, "In", "A100", "H100"), False),
    ({}, req(GPU_TYPE, "In", "A100"), False),
    ({GPU_TYPE: ""}, req(GPU_TYPE, "In", ""), True),  # an empty value is a value
    ({}, req(GPU_TYPE, "In", ""), False),
    # NotIn: a node WITHOUT the label matches.
    ({GPU_TYPE: "A100"}, req(GPU_TYPE, "NotIn", "A100"), False),
    ({GPU_TYPE: "V100"}, req(GPU_TYPE, "NotIn", "A100"), True),
    ({}, req(GPU_TYPE, "NotIn", "A100"), True),
    # Exists / DoesNotExist: only whether the key is there.
    ({GPU_TYPE: ""}, req(GPU_TYPE, "Exists"), True),
    ({"other": "x"}, req(GPU_TYPE, "Exists"), False),
    ({}, req(GPU_TYPE, "DoesNotExist"), True),
    ({GPU_TYPE: "A100"}, req(GPU_TYPE, "DoesNotExist"), False),
    # Gt / Lt: the label parsed as a 64-bit integer (strconv.ParseInt base 10), compared strictly.
    ({"gpu-count": "8"}, req("gpu-count", "Gt", "4"), True),
    ({"gpu-count": "4"}, req("gpu-count", "Gt", "4"), False),
    ({"gpu-count": "007"}, req("gpu-count", "Gt", "4"), True),
    ({"gpu-count": "-1"}, req("gpu-count", "Gt", "-2"), True),
    ({"gpu-count": "+5"}, req("gpu-count", "Gt", "4"), True),  # ParseInt accepts a sign
    ({"gpu-count": "3"}, req("gpu-count", "Lt", "4"), True),
    ({"gpu-count": "4"}, req("gpu-count", "Lt", "4"), False),
    ({"gpu-count": "-10"}, req("gpu-count", "Lt", "4"), True),
    ({}, req("gpu-count", "Gt", "4"), False),  # no label: no match (unlike NotIn)
    ({}, req("gpu-count", "Lt", "4"), False),
    ({"gpu-count": "eight"}, req("gpu-count", "Gt", "4"), False),  # not an integer: no match
    ({"gpu-count": "5.0"}, req("gpu-count", "Gt", "4"), False),
    ({"gpu-count": "0x10"}, req("gpu-count", "Gt", "4"), False),
    ({"gpu-count": "1_000"}, req("gpu-count", "Gt", "4"), False),  # Python's int() would take it
    ({"gpu-count": " 5"}, req("gpu-count", "Gt", "4"), False),
    ({"gpu-count": "٥"}, req("gpu-count", "Gt", "4"), False),  # a non-ASCII digit
    ({"gpu-count": "9223372036854775807"}, req("gpu-count", "Gt", "9223372036854775806"), True),
    ({"gpu-count": "9223372036854775808"}, req("gpu-count", "Gt", "4"), False),  # beyond int64
    # Malformed requirements match nothing (Kubernetes cannot parse them).
    ({"gpu-count": "8"}, req("gpu-count", "Gt", "four"), False),
    ({"gpu-count": "8"}, req("gpu-count", "Gt", "4", "5"), False),
    ({"gpu-count": "8"}, req("gpu-count", "Gt"), False),
    ({GPU_TYPE: "A100"}, req(GPU_TYPE, "In"), False),
    ({}, req(GPU_TYPE, "NotIn"), False),
    ({GPU_TYPE: "A100"}, req(GPU_TYPE, "Exists", "A100"), False),
    ({GPU_TYPE: "A100"}, req(GPU_TYPE, "Equals", "A100"), False),
]


@pytest.mark.parametrize(("labels", "requirement", "expected"), REQUIREMENTS)
def test_a_requirement_matches_as_kubernetes_matches_it(labels, requirement, expected):
    assert matches(labels, requirement) is expected


@pytest.mark.parametrize(
    ("text", "value"),
    [("4", 4), ("-4", -4), ("+4", 4), ("0", 0), ("", None), ("-", None), ("4a", None), ("4\n", None)],
)
def test_integers_parse_as_gos_parse_int(text, value):
    assert parse_int64(text) == value


NODES = [
    node("a100-1", labels={GPU_TYPE: "A100", "zone": "z1"}),
    node("a100-2", labels={GPU_TYPE: "A100", "zone": "z2"}),
    node("h100-1", labels={GPU_TYPE: "H100", "zone": "z1", "spot": "true"}),
    node("v100-1", labels={GPU_TYPE: "V100"}),
]


def matching(terms: tuple[NodeSelectorTerm, ...]) -> list[str]:
    index = LabelIndex(NODES)
    return [n.name for n, ok in zip(NODES, index.required(terms), strict=True) if ok]


@pytest.mark.parametrize(
    ("terms", "nodes"),
    [
        # expressions within a term are AND-ed
        ((term(req(GPU_TYPE, "In", "A100", "H100"), req("zone", "In", "z1")),), ["a100-1", "h100-1"]),
        ((term(req(GPU_TYPE, "In", "A100", "H100"), req("spot", "DoesNotExist")),), ["a100-1", "a100-2"]),
        # terms are OR-ed
        ((term(req(GPU_TYPE, "In", "V100")), term(req("spot", "Exists"))), ["h100-1", "v100-1"]),
        # NotIn keeps the nodes without the label
        ((term(req("zone", "NotIn", "z1")),), ["a100-2", "v100-1"]),
        # an empty term matches nothing, also next to a term that matches
        ((term(),), []),
        ((term(), term(req(GPU_TYPE, "In", "V100"))), ["v100-1"]),
        # no terms at all: nothing
        ((), []),
        # a malformed requirement spoils its own term only
        ((term(req("zone", "Gt", "z")), term(req("zone", "In", "z2"))), ["a100-2"]),
        # matchFields: metadata.name, In/NotIn with one value
        ((term(fields=(req("metadata.name", "In", "v100-1"),)),), ["v100-1"]),
        ((term(fields=(req("metadata.name", "NotIn", "v100-1"),)),), ["a100-1", "a100-2", "h100-1"]),
        ((term(req(GPU_TYPE, "In", "A100"), fields=(req("metadata.name", "In", "a100-2"),)),), ["a100-2"]),
        ((term(fields=(req("metadata.name", "In", "a100-1", "a100-2"),)),), []),  # two values: malformed
        ((term(fields=(req("metadata.name", "Exists"),)),), []),  # not a field operator
    ],
)
def test_required_terms_are_or_ed_and_their_expressions_and_ed(terms, nodes):
    assert matching(terms) == nodes


def test_preferred_terms_score_the_sum_of_matching_weights_normalised_by_the_highest():
    index = LabelIndex(NODES)
    terms = (
        PreferredTerm(30, term(req(GPU_TYPE, "In", "A100"))),
        PreferredTerm(50, term(req("zone", "In", "z1"))),
        PreferredTerm(0, term(req(GPU_TYPE, "In", "V100"))),  # weight 0: skipped
        PreferredTerm(100, term()),  # an empty preference: skipped
    )
    raw = index.preferred(terms, np.arange(4))
    assert raw.tolist() == [80, 30, 50, 0]
    assert by_max(raw).tolist() == [1.0, 30 / 80, 50 / 80, 0.0]
    assert by_max(np.zeros(3)).tolist() == [0, 0, 0]


def test_the_affinity_reads_as_people_write_it():
    terms = (term(req(GPU_TYPE, "In", "A100", "H100"), req("gpu-count", "Gt", "4")), term(req("spot", "Exists")))
    assert terms_text(terms[:1]) == "gpu-type In [A100, H100] and gpu-count Gt 4"
    assert terms_text(terms) == "(gpu-type In [A100, H100] and gpu-count Gt 4) or (spot Exists)"


# -- through a whole cycle -------------------------------------------------------------------------

QUEUES = ([cq("q", {"A100-80GB": 1000})], [lq("a", "q")])


def cycle(nodes, jobs):
    return run_cycle(snapshot(nodes, *QUEUES, jobs), Policy(), NOW)


def affine(*terms: NodeSelectorTerm, **kwargs) -> PlacementRules:
    return PlacementRules(required_terms=terms, **kwargs)


def test_the_seeds_example_runs_only_on_a100_or_h100_nodes():
    nodes = [node(f"n{i:02d}", labels={GPU_TYPE: t}) for i, t in enumerate(["V100", "A100", "T4", "H100"])]
    rules = affine(term(req(GPU_TYPE, "In", "A100", "H100")))
    plan = cycle(nodes, [job("j", "a", gpu=8, replicas=2, rules=rules)])
    assert admitted_ids(plan) == ["j"]
    assert sorted(p.node for p in plan.admissions[0].placements) == ["n01", "n03"]


def test_a_job_no_node_matches_is_told_which_affinity_matched_none_and_that_waiting_will_not_help():
    nodes = [node(f"n{i:02d}", labels={GPU_TYPE: "V100"}) for i in range(12)]
    plan = cycle(nodes, [job("j", "a", gpu=1, rules=affine(term(req(GPU_TYPE, "In", "A100", "H100"))))])
    assert reason_of(plan, "j") == (
        "placement: never fits as configured: none of the 12 A100-80GB nodes passes the job's filters: "
        "12 not matching node affinity gpu-type In [A100, H100]"
    )
    assert pending_info(plan, "j").reason.waits is False


def test_a_job_whose_matching_nodes_are_busy_waits_and_the_reason_counts_the_others():
    nodes = [node(f"n{i:02d}", gpus=1, labels={GPU_TYPE: "V100"}) for i in range(11)]
    nodes.append(node("n11", gpus=1, labels={GPU_TYPE: "A100"}))
    busy = running("busy", "a", [("n11", (0,))])
    plan = cycle(nodes, [busy, job("j", "a", gpu=1, rules=affine(term(req(GPU_TYPE, "In", "A100", "H100"))))])
    reason = pending_info(plan, "j").reason
    assert reason.message.startswith(
        "placement: 0 of 12 nodes fit: 11 not matching node affinity gpu-type In [A100, H100], 1 too few free GPUs"
    )
    assert reason.waits is True


def test_node_selector_and_node_affinity_must_both_hold():
    nodes = [node("n1", labels={"disk": "ssd", GPU_TYPE: "V100"}), node("n2", labels={GPU_TYPE: "A100"})]
    rules = affine(term(req(GPU_TYPE, "In", "A100")))
    plan = cycle(nodes, [job("j", "a", gpu=1, rules=rules, node_selector=labels_of({"disk": "ssd"}))])
    assert reason_of(plan, "j") == (
        "placement: never fits as configured: none of the 2 A100-80GB nodes passes the job's filters: "
        "1 node selector does not match, 1 not matching node affinity gpu-type In [A100]"
    )


def test_a_node_selector_with_an_empty_value_needs_the_label():
    nodes = [node("n1"), node("n2", labels={"flag": ""})]
    plan = cycle(nodes, [job("j", "a", gpu=1, node_selector=labels_of({"flag": ""}))])
    assert [p.node for p in plan.admissions[0].placements] == ["n2"]


def test_preferred_terms_pick_among_nodes_that_fit():
    # Without preferences binpack takes the busier n1; the preferred terms (30 + 30 on n2 against 50
    # on n3) send the job to n2.
    nodes = [
        node("n1", labels={}),
        node("n2", labels={"a": "1", "b": "1"}),
        node("n3", labels={"c": "1"}),
    ]
    rules = PlacementRules(
        preferred_terms=(
            PreferredTerm(30, term(req("a", "Exists"))),
            PreferredTerm(30, term(req("b", "Exists"))),
            PreferredTerm(50, term(req("c", "Exists"))),
        )
    )
    busy = running("busy", "a", [("n1", (0, 1))])
    plan = cycle(nodes, [busy, job("j", "a", gpu=1, rules=rules)])
    assert [p.node for a in plan.admissions if a.workload_id == "j" for p in a.placements] == ["n2"]
    plain = cycle(nodes, [busy, job("j", "a", gpu=1)])
    assert [p.node for p in plain.admissions[0].placements] == ["n1"]


def test_rules_unpickled_in_another_process_hash_as_that_process_hashes_them():
    # The dry run's state goes from the scheduler to the web processes pickled; each process hashes
    # strings with its own seed. Rules hashed before pickling must not carry that hash along, or equal
    # rules would miss each other in the other process's dicts and sets.
    import pickle
    import subprocess
    import sys
    from pathlib import Path

    rules = affine(NodeSelectorTerm((Requirement("gpu-type", "In", ("A100", "H100")),)))
    hash(rules)
    blob = pickle.dumps(rules)
    probe = (
        "import pickle, sys\n"
        "from scheduling.engine.model import NodeSelectorTerm, PlacementRules, Requirement\n"
        "got = pickle.loads(sys.stdin.buffer.read())\n"
        "term = NodeSelectorTerm((Requirement('gpu-type', 'In', ('A100', 'H100')),))\n"
        "fresh = PlacementRules(required_terms=(term,))\n"
        "print(got == fresh, hash(got) == hash(fresh), fresh in {got})\n"
    )
    root = Path(__file__).resolve().parents[3]
    for seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", probe], input=blob, capture_output=True, check=True, cwd=root,
            env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"},
        )  # fmt: skip
        assert out.stdout.decode().split() == ["True", "True", "True"]
