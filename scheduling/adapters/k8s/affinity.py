"""A job's placement rules in Kubernetes' own words, to and from the engine's values. Pure: no
``kubernetes``, no Django.

What a job may carry (as a pod spec writes it, camelCase):

- ``affinity.nodeAffinity``: ``requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms``
  (``matchExpressions``, ``matchFields``) and ``preferredDuringSchedulingIgnoredDuringExecution``
  (``weight`` 1-100, ``preference``);
- ``affinity.podAntiAffinity``: required terms (``topologyKey``) and preferred ones (``weight``,
  ``podAffinityTerm.topologyKey``). They apply between the job's own replicas: the portal writes the
  ``labelSelector`` (the job's label) itself, so a job's request may not carry one;
- ``topologySpreadConstraints``: ``maxSkew``, ``topologyKey``, ``whenUnsatisfiable``
  (``DoNotSchedule`` | ``ScheduleAnyway``), ``minDomains``, ``nodeAffinityPolicy``,
  ``nodeTaintsPolicy``; over the job's own replicas, the ``labelSelector`` again the portal's;
- ``required_topology``: every replica of the gang in one ``node``, ``rack``, ``zone``, ``nvlink``
  domain or one domain of any node label (Kueue's ``podset-required-topology``).

:func:`parse_rules` checks a request as the Kubernetes API server validates a pod (``ValidateAffinity``,
``ValidateTopologySpreadConstraints``) and a little more where Kubernetes would accept a rule that can
never match (a ``Gt`` value that is not an integer, a value that is not a label value), bounded so that
no tenant's rules can slow the cycle down (``MAX_*``), and raises :class:`RulesError` naming the field
and the path inside it. :func:`pod_fields` writes the rules back onto a pod, so the kubelet and anyone
reading the pod see the same rules the engine applied.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from scheduling.adapters.k8s.pods import LABEL_JOB, valid_label
from scheduling.engine.affinity import NODE_NAME_FIELD, requirement_problem, term_text, terms_text
from scheduling.engine.model import (
    AntiAffinityTerm,
    NodeSelectorTerm,
    PlacementRules,
    PreferredTerm,
    Requirement,
    SpreadConstraint,
)

MAX_TERMS = 8  # required node selector terms, and preferred terms
MAX_REQUIREMENTS = 8  # per term, expressions and fields together
MAX_VALUES = 16  # per requirement
MAX_ANTI_AFFINITY_TERMS = 4
MAX_SPREAD_CONSTRAINTS = 4
MAX_SKEW = 1024
LEVELS = ("node", "rack", "zone", "nvlink")
ANN_REQUIRED_TOPOLOGY = "gpu-portal.io/required-topology"

_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
_INTEGER = re.compile(r"^[+-]?[0-9]+$")


class RulesError(ValueError):
    """A placement rule Kubernetes (or the portal's bounds) would refuse; ``field`` is the job
    request's field, the message starts with the path inside it."""

    def __init__(self, field: str, path: str, message: str) -> None:
        self.field = field
        self.message = f"{path}: {message}" if path else message
        super().__init__(f"{field}.{self.message}")


class _Reader:
    """Walks one field of a request, checking shapes and naming the path on error."""

    def __init__(self, field: str) -> None:
        self.field = field

    def fail(self, path: str, message: str) -> RulesError:
        return RulesError(self.field, path, message)

    def mapping(self, value: Any, path: str, allowed: tuple[str, ...], hint: str = "") -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.fail(path, f"expected an object, got {type(value).__name__}")
        unknown = sorted(str(k) for k in value if k not in allowed)
        if unknown:
            known = ", ".join(allowed)
            raise self.fail(f"{path}.{unknown[0]}" if path else unknown[0], hint or f"unknown field (known: {known})")
        return value

    def sequence(self, value: Any, path: str, most: int, least: int = 0) -> list[Any]:
        if not isinstance(value, list | tuple):
            raise self.fail(path, f"expected a list, got {type(value).__name__}")
        if len(value) > most:
            raise self.fail(path, f"at most {most} entries (got {len(value)})")
        if len(value) < least:
            raise self.fail(path, f"at least {least} {'entry' if least == 1 else 'entries'}")
        return list(value)

    def string(self, value: Any, path: str) -> str:
        if not isinstance(value, str):
            raise self.fail(path, f"expected a string, got {type(value).__name__}")
        return value

    def integer(self, value: Any, path: str, low: int, high: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"expected an integer, got {value!r}")
        if not low <= value <= high:
            raise self.fail(path, f"must be between {low} and {high} (got {value})")
        return value

    def label_key(self, value: Any, path: str) -> str:
        if value is None:
            raise self.fail(path, "required")
        key = self.string(value, path)
        if not key or not valid_label(key, "") or len(key) > 316:
            raise self.fail(
                path, f"{key!r} is not a label key (an optional DNS prefix and '/', then 1-63 of [A-Za-z0-9-_.])"
            )
        return key

    def choice(self, value: Any, path: str, choices: tuple[str, ...], default: str) -> str:
        if value is None:
            return default
        text = self.string(value, path)
        if text not in choices:
            raise self.fail(path, f"{text!r} is not one of {', '.join(choices)}")
        return text


# -- node affinity ------------------------------------------------------------------------------------


def _requirement(r: _Reader, value: Any, path: str, field: bool) -> Requirement:
    data = r.mapping(value, path, ("key", "operator", "values"))
    key_path = f"{path}.key"
    if field:
        key = r.string(data.get("key"), key_path)
        if key != NODE_NAME_FIELD:
            raise r.fail(key_path, f"{key!r} is not a node field Kubernetes selects on (only {NODE_NAME_FIELD})")
    else:
        key = r.label_key(data.get("key"), key_path)
    operator = r.string(data.get("operator"), f"{path}.operator")
    raw = data.get("values", [])
    values = tuple(
        r.string(v, f"{path}.values[{i}]") for i, v in enumerate(r.sequence(raw, f"{path}.values", MAX_VALUES))
    )
    requirement = Requirement(key, operator, values)
    if problem := requirement_problem(requirement, field):
        where = f"{path}.operator" if problem.startswith("operator") else f"{path}.values"
        raise r.fail(where, problem)
    for i, v in enumerate(values):
        if operator in ("Gt", "Lt"):
            if not _INTEGER.match(v):
                raise r.fail(f"{path}.values[{i}]", f"{operator} compares integers: {v!r} is not one")
        elif not valid_label("k", v) or len(v) > 63:
            raise r.fail(
                f"{path}.values[{i}]", f"{v!r} is not a label value (0-63 of [A-Za-z0-9-_.]), so no node has it"
            )
    return requirement


def _term(r: _Reader, value: Any, path: str) -> NodeSelectorTerm:
    data = r.mapping(value, path, ("matchExpressions", "matchFields"))
    expressions = r.sequence(data.get("matchExpressions", []), f"{path}.matchExpressions", MAX_REQUIREMENTS)
    fields = r.sequence(data.get("matchFields", []), f"{path}.matchFields", MAX_REQUIREMENTS)
    if len(expressions) + len(fields) > MAX_REQUIREMENTS:
        raise r.fail(path, f"at most {MAX_REQUIREMENTS} expressions and fields together")
    return NodeSelectorTerm(
        tuple(_requirement(r, e, f"{path}.matchExpressions[{i}]", False) for i, e in enumerate(expressions)),
        tuple(_requirement(r, f, f"{path}.matchFields[{i}]", True) for i, f in enumerate(fields)),
    )


def _node_affinity(
    r: _Reader, value: Any, path: str
) -> tuple[tuple[NodeSelectorTerm, ...] | None, tuple[PreferredTerm, ...]]:
    data = r.mapping(value, path, (_REQUIRED, _PREFERRED))
    required = None
    if data.get(_REQUIRED) is not None:
        selector = r.mapping(data[_REQUIRED], f"{path}.{_REQUIRED}", ("nodeSelectorTerms",))
        terms_path = f"{path}.{_REQUIRED}.nodeSelectorTerms"
        terms = r.sequence(selector.get("nodeSelectorTerms", []), terms_path, MAX_TERMS, least=1)
        required = tuple(_term(r, t, f"{terms_path}[{i}]") for i, t in enumerate(terms))
    preferred = []
    for i, item in enumerate(r.sequence(data.get(_PREFERRED, []), f"{path}.{_PREFERRED}", MAX_TERMS)):
        item_path = f"{path}.{_PREFERRED}[{i}]"
        entry = r.mapping(item, item_path, ("weight", "preference"))
        weight = r.integer(entry.get("weight"), f"{item_path}.weight", 1, 100)
        preferred.append(PreferredTerm(weight, _term(r, entry.get("preference", {}), f"{item_path}.preference")))
    return required, tuple(preferred)


# -- pod anti-affinity --------------------------------------------------------------------------------

_OWN_REPLICAS = "the portal applies it between the job's own replicas and writes the selector itself; leave it out"


def _anti_term(r: _Reader, value: Any, path: str, weight: int) -> AntiAffinityTerm:
    data = r.mapping(value, path, ("topologyKey",), hint=_OWN_REPLICAS)
    return AntiAffinityTerm(r.label_key(data.get("topologyKey"), f"{path}.topologyKey"), weight)


def _pod_anti_affinity(r: _Reader, value: Any, path: str) -> tuple[AntiAffinityTerm, ...]:
    data = r.mapping(value, path, (_REQUIRED, _PREFERRED))
    terms = [
        _anti_term(r, t, f"{path}.{_REQUIRED}[{i}]", 0)
        for i, t in enumerate(r.sequence(data.get(_REQUIRED, []), f"{path}.{_REQUIRED}", MAX_ANTI_AFFINITY_TERMS))
    ]
    for i, item in enumerate(r.sequence(data.get(_PREFERRED, []), f"{path}.{_PREFERRED}", MAX_ANTI_AFFINITY_TERMS)):
        item_path = f"{path}.{_PREFERRED}[{i}]"
        entry = r.mapping(item, item_path, ("weight", "podAffinityTerm"))
        weight = r.integer(entry.get("weight"), f"{item_path}.weight", 1, 100)
        terms.append(_anti_term(r, entry.get("podAffinityTerm"), f"{item_path}.podAffinityTerm", weight))
    if len(terms) > MAX_ANTI_AFFINITY_TERMS:
        raise r.fail(path, f"at most {MAX_ANTI_AFFINITY_TERMS} terms in all")
    return tuple(terms)


# -- topology spread ----------------------------------------------------------------------------------


def _spread(r: _Reader, value: Any) -> tuple[SpreadConstraint, ...]:
    out = []
    seen: set[tuple[str, str]] = set()
    for i, item in enumerate(r.sequence(value, "", MAX_SPREAD_CONSTRAINTS)):
        path = f"[{i}]"
        data = r.mapping(
            item,
            path,
            ("maxSkew", "topologyKey", "whenUnsatisfiable", "minDomains", "nodeAffinityPolicy", "nodeTaintsPolicy"),
            hint="" if not isinstance(item, Mapping) or "labelSelector" not in item else _OWN_REPLICAS,
        )
        when = r.string(data.get("whenUnsatisfiable"), f"{path}.whenUnsatisfiable")
        if when not in ("DoNotSchedule", "ScheduleAnyway"):
            raise r.fail(f"{path}.whenUnsatisfiable", f"{when!r} is not DoNotSchedule or ScheduleAnyway")
        min_domains = 1
        if data.get("minDomains") is not None:
            if when != "DoNotSchedule":
                raise r.fail(f"{path}.minDomains", "can only be set when whenUnsatisfiable is DoNotSchedule")
            min_domains = r.integer(data["minDomains"], f"{path}.minDomains", 1, MAX_SKEW)
        policies = ("Honor", "Ignore")
        constraint = SpreadConstraint(
            max_skew=r.integer(data.get("maxSkew"), f"{path}.maxSkew", 1, MAX_SKEW),
            topology_key=r.label_key(data.get("topologyKey"), f"{path}.topologyKey"),
            when_unsatisfiable=when,
            min_domains=min_domains,
            node_affinity_policy=r.choice(
                data.get("nodeAffinityPolicy"), f"{path}.nodeAffinityPolicy", policies, "Honor"
            ),
            node_taints_policy=r.choice(data.get("nodeTaintsPolicy"), f"{path}.nodeTaintsPolicy", policies, "Ignore"),
        )
        pair = (constraint.topology_key, when)
        if pair in seen:
            raise r.fail(path, f"a second constraint on {pair[0]} with {when}")
        seen.add(pair)
        out.append(constraint)
    return tuple(out)


def _required_topology(value: Any) -> str:
    r = _Reader("required_topology")
    text = r.string(value if value is not None else "", "")
    if text and text not in LEVELS and not valid_label(text, ""):
        raise r.fail("", f"{text!r} is not node, rack, zone, nvlink or a node label key")
    return text


# -- the whole request --------------------------------------------------------------------------------


def parse_rules(affinity: Any = None, spread: Any = None, required_topology: Any = "") -> PlacementRules | None:
    """The engine's rules of a job's request (``None`` when it has none); raises :class:`RulesError`."""
    r = _Reader("affinity")
    data = r.mapping(
        affinity if affinity is not None else {},
        "",
        ("nodeAffinity", "podAntiAffinity"),
        hint=""
        if not isinstance(affinity, Mapping) or "podAffinity" not in affinity
        else (
            "pod affinity is not supported: to keep a gang together use required_topology (node, rack, zone, nvlink)"
        ),
    )
    required, preferred = (
        _node_affinity(r, data["nodeAffinity"], "nodeAffinity") if data.get("nodeAffinity") else (None, ())
    )
    anti = _pod_anti_affinity(r, data["podAntiAffinity"], "podAntiAffinity") if data.get("podAntiAffinity") else ()
    constraints = _spread(_Reader("topology_spread_constraints"), spread if spread is not None else [])
    level = _required_topology(required_topology)
    rules = PlacementRules(required, preferred, anti, constraints, level)
    return None if rules == PlacementRules() else rules


# -- onto a pod ---------------------------------------------------------------------------------------


def _term_json(term: NodeSelectorTerm) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if term.match_expressions:
        out["matchExpressions"] = [_requirement_json(q) for q in term.match_expressions]
    if term.match_fields:
        out["matchFields"] = [_requirement_json(q) for q in term.match_fields]
    return out


def _requirement_json(q: Requirement) -> dict[str, Any]:
    out: dict[str, Any] = {"key": q.key, "operator": q.operator}
    if q.values:
        out["values"] = list(q.values)
    return out


def pod_fields(rules: PlacementRules | None, job_id: int) -> dict[str, Any]:
    """The pod spec fields that carry ``rules`` (``affinity``, ``topologySpreadConstraints``); the
    selector of the anti-affinity and spread terms is the job's own pods."""
    if rules is None:
        return {}
    own = {"matchLabels": {LABEL_JOB: str(job_id)}}
    affinity: dict[str, Any] = {}
    node: dict[str, Any] = {}
    if rules.required_terms is not None:
        node[_REQUIRED] = {"nodeSelectorTerms": [_term_json(t) for t in rules.required_terms]}
    if rules.preferred_terms:
        node[_PREFERRED] = [{"weight": p.weight, "preference": _term_json(p.preference)} for p in rules.preferred_terms]
    if node:
        affinity["nodeAffinity"] = node
    anti: dict[str, Any] = {}
    required_anti = [{"topologyKey": t.topology_key, "labelSelector": own} for t in rules.anti_affinity if not t.weight]
    preferred_anti = [
        {"weight": t.weight, "podAffinityTerm": {"topologyKey": t.topology_key, "labelSelector": own}}
        for t in rules.anti_affinity
        if t.weight
    ]
    if required_anti:
        anti[_REQUIRED] = required_anti
    if preferred_anti:
        anti[_PREFERRED] = preferred_anti
    if anti:
        affinity["podAntiAffinity"] = anti
    out: dict[str, Any] = {}
    if affinity:
        out["affinity"] = affinity
    if rules.spread:
        out["topologySpreadConstraints"] = [_spread_json(c, own) for c in rules.spread]
    return out


def _spread_json(c: SpreadConstraint, own: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "maxSkew": c.max_skew,
        "topologyKey": c.topology_key,
        "whenUnsatisfiable": c.when_unsatisfiable,
        "labelSelector": own,
        "nodeAffinityPolicy": c.node_affinity_policy,
        "nodeTaintsPolicy": c.node_taints_policy,
    }
    if c.when_unsatisfiable == "DoNotSchedule" and c.min_domains != 1:
        out["minDomains"] = c.min_domains
    return out


# -- in words -----------------------------------------------------------------------------------------


def describe(rules: PlacementRules | None, levels: Mapping[str, str]) -> list[tuple[str, str]]:
    """``(what, rule)`` lines for a job's page: the rules as they read, with the label a level names."""
    if rules is None:
        return []
    lines = []
    if rules.required_terms is not None:
        lines.append(("Node affinity (required)", terms_text(rules.required_terms)))
    if rules.preferred_terms:
        text = "; ".join(f"{term_text(p.preference)} (weight {p.weight})" for p in rules.preferred_terms)
        lines.append(("Node affinity (preferred)", text))
    if rules.anti_affinity:
        text = "; ".join(
            f"preferred (weight {t.weight}): replicas in as few shared {t.topology_key} domains as possible"
            if t.weight
            else f"required: at most one replica per {t.topology_key}"
            for t in rules.anti_affinity
        )
        lines.append(("Pod anti-affinity", text))
    for c in rules.spread:
        text = f"maxSkew {c.max_skew} over {c.topology_key}, {c.when_unsatisfiable}"
        if c.min_domains != 1:
            text += f", minDomains {c.min_domains}"
        if (c.node_affinity_policy, c.node_taints_policy) != ("Honor", "Ignore"):
            text += f" (nodeAffinityPolicy {c.node_affinity_policy}, nodeTaintsPolicy {c.node_taints_policy})"
        lines.append(("Topology spread", text))
    if rules.required_topology:
        level = rules.required_topology
        key = levels.get(level, level)
        lines.append(("All replicas in", f"one {level} ({key})" if key != level else f"one {key} domain"))
    return lines
