"""Hypothesis: on random labelled clusters and random placement rules, no admission ever breaks a
required node affinity, a required pod anti-affinity, a DoNotSchedule spread constraint or a
one-domain gang. The checks are written here from Kubernetes' rules, independently of the engine's
matching code."""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduling.engine.cycle import run_cycle
from scheduling.engine.model import (
    AntiAffinityTerm,
    GpuNode,
    NodeSelectorTerm,
    PlacementRules,
    Policy,
    Requirement,
    SpreadConstraint,
    Taint,
    Workload,
)
from scheduling.engine.verdict import never_fits

from .builders import RACK, ZONE, cq, job, lq, node, snapshot

HOST = "kubernetes.io/hostname"
CLIQUE = "nvidia.com/gpu.clique"
SETTINGS = settings(
    max_examples=int(os.environ.get("ENGINE_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
LEVELS = {"node": HOST, "rack": RACK, "zone": ZONE, "nvlink": CLIQUE}


# -- the rules, written from Kubernetes' documentation -----------------------------------------------


def k8s_int(text: str) -> int | None:
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


def requirement_holds(labels: dict[str, str], r: Requirement) -> bool:
    has = r.key in labels
    if r.operator == "In":
        return bool(r.values) and has and labels[r.key] in r.values
    if r.operator == "NotIn":
        return bool(r.values) and (not has or labels[r.key] not in r.values)
    if r.operator == "Exists":
        return not r.values and has
    if r.operator == "DoesNotExist":
        return not r.values and not has
    if r.operator in ("Gt", "Lt") and len(r.values) == 1 and has:
        mine, bound = k8s_int(labels[r.key]), k8s_int(r.values[0])
        if mine is None or bound is None:
            return False
        return mine > bound if r.operator == "Gt" else mine < bound
    return False


def term_holds(labels: dict[str, str], term: NodeSelectorTerm) -> bool:
    return bool(term.match_expressions) and all(requirement_holds(labels, r) for r in term.match_expressions)


def domain(n: GpuNode, key: str) -> str | None:
    labels = dict(n.labels)
    return labels.get(key, n.name) if key == HOST else labels.get(key)


def tolerated(n: GpuNode, w: Workload) -> bool:
    def ok(t: Taint) -> bool:
        return any(
            (not tol.effect or tol.effect == t.effect)
            and (not tol.key or tol.key == t.key)
            and (tol.operator == "Exists" or tol.value == t.value)
            for tol in w.tolerations
        )

    return all(ok(t) for t in n.taints if t.effect in ("NoSchedule", "NoExecute"))


# -- random clusters and rules ---------------------------------------------------------------------

VALUES = {"gpu-type": ("A100", "H100", "V100"), "gpu-count": ("4", "8", "x", "-1"), "spot": ("true", "")}


@st.composite
def clusters(draw):
    out = []
    for i in range(draw(st.integers(2, 10))):
        labels = {}
        for key, values in VALUES.items():
            if draw(st.integers(0, 3)):
                labels[key] = draw(st.sampled_from(values))
        if draw(st.integers(0, 4)):
            labels[ZONE] = f"z{draw(st.integers(0, 2))}"
        if draw(st.integers(0, 4)):
            labels[RACK] = f"r{draw(st.integers(0, 3))}"
        if draw(st.booleans()):
            labels[CLIQUE] = f"c{draw(st.integers(0, 1))}"
        taints = (Taint("spot", "true"),) if draw(st.integers(0, 5)) == 0 else ()
        out.append(
            node(
                f"n{i:02d}",
                gpus=draw(st.sampled_from((1, 2, 4, 8))),
                labels=labels,
                taints=taints,
                cordoned=i > 0 and draw(st.integers(0, 9)) == 0,
            )
        )
    return out


@st.composite
def requirements(draw):
    key = draw(st.sampled_from(sorted(VALUES)))
    operator = draw(st.sampled_from(("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")))
    if operator in ("In", "NotIn"):
        values = tuple(draw(st.lists(st.sampled_from(VALUES[key]), min_size=1, max_size=2, unique=True)))
    elif operator in ("Gt", "Lt"):
        values = (draw(st.sampled_from(("0", "5", "-2"))),)
    else:
        values = ()
    return Requirement(key, operator, values)


@st.composite
def rules(draw):
    required = None
    if draw(st.booleans()):
        required = tuple(
            NodeSelectorTerm(tuple(draw(st.lists(requirements(), min_size=1, max_size=2))))
            for _ in range(draw(st.integers(1, 2)))
        )
    anti = tuple(
        AntiAffinityTerm(draw(st.sampled_from((HOST, ZONE, RACK))), draw(st.sampled_from((0, 0, 10))))
        for _ in range(draw(st.integers(0, 1)))
    )
    spread = tuple(
        SpreadConstraint(
            draw(st.integers(1, 2)),
            draw(st.sampled_from((ZONE, RACK, HOST))),
            draw(st.sampled_from(("DoNotSchedule", "DoNotSchedule", "ScheduleAnyway"))),
            min_domains=draw(st.integers(1, 3)),
            node_taints_policy=draw(st.sampled_from(("Ignore", "Honor"))),
            node_affinity_policy=draw(st.sampled_from(("Honor", "Ignore"))),
        )
        for _ in range(draw(st.integers(0, 1)))
    )
    level = draw(st.sampled_from(("", "", "node", "rack", "zone", "nvlink")))
    return PlacementRules(required_terms=required, anti_affinity=anti, spread=spread, required_topology=level)


@st.composite
def scenarios(draw):
    nodes = draw(clusters())
    jobs = []
    for i in range(draw(st.integers(1, 6))):
        replicas = draw(st.integers(1, 4))
        kind = draw(st.sampled_from(("gpu", "gpu", "milli")))
        request = (
            {"gpu": draw(st.sampled_from((1, 2)))} if kind == "gpu" else {"milli": draw(st.sampled_from((250, 500)))}
        )
        jobs.append(
            job(
                f"j{i}",
                "a",
                created=float(i),
                replicas=replicas,
                min_available=draw(st.integers(0, replicas)),
                rules=draw(rules()) if draw(st.integers(0, 4)) else None,
                **request,
            )
        )
    return nodes, jobs


def plan_of(nodes, jobs):
    snap = snapshot(nodes, [cq("q", {"A100-80GB": 1000})], [lq("a", "q")], jobs)
    return run_cycle(snap, Policy(), 0.0)


# -- the properties --------------------------------------------------------------------------------


def admitted(nodes, jobs):
    plan = plan_of(nodes, jobs)
    by_name = {n.name: n for n in nodes}
    by_id = {w.id: w for w in jobs}
    for a in plan.admissions:
        yield by_id[a.workload_id], [by_name[p.node] for p in a.placements], a.gpu_model


@SETTINGS
@given(scenarios())
def test_no_replica_lands_on_a_node_its_required_affinity_excludes(scenario):
    nodes, jobs = scenario
    for w, placed, _ in admitted(nodes, jobs):
        if w.rules is None or w.rules.required_terms is None:
            continue
        for n in placed:
            assert any(term_holds(dict(n.labels), t) for t in w.rules.required_terms), (w.id, n.name)


@SETTINGS
@given(scenarios())
def test_no_two_replicas_share_a_domain_their_required_anti_affinity_forbids(scenario):
    nodes, jobs = scenario
    for w, placed, _ in admitted(nodes, jobs):
        for term in w.rules.anti_affinity if w.rules else ():
            if term.weight:
                continue
            domains = [d for n in placed if (d := domain(n, term.topology_key)) is not None]
            assert len(domains) == len(set(domains)), (w.id, term.topology_key, domains)


@SETTINGS
@given(scenarios())
def test_a_do_not_schedule_spread_constraint_is_never_exceeded(scenario):
    nodes, jobs = scenario
    for w, placed, model in admitted(nodes, jobs):
        hard = [c for c in (w.rules.spread if w.rules else ()) if c.when_unsatisfiable == "DoNotSchedule"]
        keys = [c.topology_key for c in hard]
        for c in hard:
            # Eligible domains: the admitted model's plain nodes carrying every DoNotSchedule label,
            # matching the required affinity (Honor) and tolerated and schedulable (taints Honor).
            eligible = [
                n
                for n in nodes
                if n.gpu_model == model
                and not n.mig_enabled
                and all(domain(n, k) is not None for k in keys)
                and (
                    c.node_affinity_policy == "Ignore"
                    or w.rules is None
                    or w.rules.required_terms is None
                    or any(term_holds(dict(n.labels), t) for t in w.rules.required_terms)
                )
                and (c.node_taints_policy != "Honor" or (tolerated(n, w) and not n.unschedulable))
            ]
            domains = {domain(n, c.topology_key) for n in eligible}
            counts = Counter(domain(n, c.topology_key) for n in placed if n in eligible)
            low = 0 if len(domains) < c.min_domains else min(counts.get(d, 0) for d in domains)
            for d in counts:
                assert d in domains
                assert counts[d] - low <= c.max_skew, (w.id, c, counts, domains)
            assert all(domain(n, c.topology_key) is not None for n in placed)


@SETTINGS
@given(scenarios())
def test_a_one_domain_gang_is_always_in_one_domain(scenario):
    nodes, jobs = scenario
    for w, placed, _ in admitted(nodes, jobs):
        if w.rules is None or not w.rules.required_topology:
            continue
        key = LEVELS[w.rules.required_topology]
        domains = {domain(n, key) for n in placed}
        assert None not in domains, (w.id, key)
        assert len(domains) == 1, (w.id, key, domains)


@SETTINGS
@given(scenarios())
def test_rules_never_change_the_plan_between_identical_runs(scenario):
    nodes, jobs = scenario
    assert plan_of(nodes, jobs) == plan_of(nodes, jobs)


@SETTINGS
@given(scenarios())
def test_a_job_with_rules_called_never_fitting_is_admitted_on_no_empty_cluster_of_that_configuration(scenario):
    nodes, jobs = scenario
    empty = [replace(n, unschedulable=False) for n in nodes]  # as configured: cordons lifted
    for w in jobs:
        snap = snapshot(empty, [cq("q", {"A100-80GB": 1000})], [lq("a", "q")], [w])
        if never_fits(snap, w) is not None:
            assert run_cycle(snap, Policy(), 0.0).admissions == (), w
