"""Node affinity by Kubernetes' rules, as boolean masks over a cycle's nodes.

A requirement ``key operator values`` matches a node (``k8s.io/apimachinery`` ``labels.Requirement``):

- ``In``: the node has the label and its value is one of ``values``;
- ``NotIn``: the node does not have the label, or its value is none of ``values``;
- ``Exists`` / ``DoesNotExist``: the node has / does not have the label;
- ``Gt`` / ``Lt``: the node has the label, it parses as a 64-bit integer (Go's ``strconv.ParseInt``
  base 10: an optional sign and ASCII digits, nothing else), and it is greater / less than the one
  value, parsed the same way.

A term (``NodeSelectorTerm``) matches when all its requirements do; a term without any requirement
matches no node, and a term with a malformed requirement (an unknown operator, ``In`` without values,
``Gt`` with a value that is not an integer) matches no node either (``component-helpers``
``nodeaffinity``). Required terms are OR-ed: a node must match one of them, so an empty list of terms
matches no node. ``match_fields`` tests the node's fields; Kubernetes defines only ``metadata.name``,
with ``In`` or ``NotIn`` and exactly one value.

Preferred terms score a node the sum of the weights of the terms it matches (weight-0 and empty
terms are skipped), and kube-scheduler's NodeAffinity plugin normalises that by the highest score
among the candidate nodes (:func:`preferred_scores`, :func:`by_max`).

Masks are cached per requirement for the cycle (:class:`LabelIndex`), so the cost of a rule is paid
once per distinct rule, not once per job.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from .model import GpuNode, NodeSelectorTerm, PreferredTerm, Requirement

HOSTNAME = "kubernetes.io/hostname"
NODE_NAME_FIELD = "metadata.name"
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
_INT = re.compile(r"[+-]?[0-9]+\Z")
_INT64 = (-(2**63), 2**63 - 1)


def parse_int64(text: str) -> int | None:
    """Go's ``strconv.ParseInt(text, 10, 64)``: an optional sign and ASCII digits, within int64."""
    if not _INT.match(text):
        return None
    value = int(text)
    return value if _INT64[0] <= value <= _INT64[1] else None


def requirement_problem(req: Requirement, field: bool = False) -> str | None:
    """Why Kubernetes would refuse to parse ``req`` (None when it parses): the operator, and the
    number and form of its values. ``field``: a requirement of ``match_fields``."""
    if field:
        if req.operator not in ("In", "NotIn"):
            return f"operator {req.operator!r} is not In or NotIn (the only ones for matchFields)"
        if len(req.values) != 1:
            return f"{req.operator} on a field takes exactly one value (got {len(req.values)})"
        return None
    if req.operator not in OPERATORS:
        return f"operator {req.operator!r} is not one of {', '.join(OPERATORS)}"
    if req.operator in ("In", "NotIn") and not req.values:
        return f"{req.operator} needs at least one value"
    if req.operator in ("Exists", "DoesNotExist") and req.values:
        return f"{req.operator} takes no values"
    if req.operator in ("Gt", "Lt"):
        if len(req.values) != 1:
            return f"{req.operator} takes exactly one value (got {len(req.values)})"
        if parse_int64(req.values[0]) is None:
            return f"{req.operator} compares integers: {req.values[0]!r} is not one"
    return None


class LabelIndex:
    """The nodes' labels as arrays, built per key on first use, and masks cached per requirement."""

    def __init__(self, nodes: Sequence[GpuNode]) -> None:
        self.nodes = nodes
        self.labels = [dict(node.labels) for node in nodes]
        self.n = len(nodes)
        self._values: dict[str, np.ndarray] = {}
        self._codes: dict[tuple[str, bool], tuple[np.ndarray, tuple[str, ...]]] = {}
        self._ints: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._req_masks: dict[tuple[Requirement, bool], np.ndarray] = {}
        self._term_masks: dict[NodeSelectorTerm, np.ndarray] = {}
        self._required: dict[tuple[NodeSelectorTerm, ...], np.ndarray] = {}

    def values(self, key: str) -> np.ndarray:
        """Per node the label's value, ``None`` where the node does not have it (an object array)."""
        values = self._values.get(key)
        if values is None:
            values = np.empty(self.n, dtype=object)
            values[:] = [labels.get(key) for labels in self.labels]
            self._values[key] = values
        return values

    def codes(self, key: str, hostname_fallback: bool = False) -> tuple[np.ndarray, tuple[str, ...]]:
        """Per node an integer code of its value of ``key`` (-1: no such label) and the value table.

        With ``hostname_fallback`` (topology domains), a node without ``kubernetes.io/hostname`` is
        its own domain, named after the node (the kubelet sets that label to the node's name)."""
        fallback = hostname_fallback and key == HOSTNAME
        cached = self._codes.get((key, fallback))
        if cached is None:
            raw = [
                labels.get(key, node.name if fallback else None)
                for labels, node in zip(self.labels, self.nodes, strict=True)
            ]
            table = tuple(sorted({v for v in raw if v is not None}))
            code = {v: i for i, v in enumerate(table)}
            arr = np.array([-1 if v is None else code[v] for v in raw], dtype=np.int32)
            cached = self._codes[(key, fallback)] = (arr, table)
        return cached

    def domains(self, key: str) -> tuple[np.ndarray, tuple[str, ...]]:
        """Topology domains of ``key``: :meth:`codes` with the hostname fallback."""
        return self.codes(key, hostname_fallback=True)

    def _integers(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        cached = self._ints.get(key)
        if cached is None:
            parsed = [None if v is None else parse_int64(v) for v in self.values(key).tolist()]
            ok = np.array([p is not None for p in parsed], dtype=bool)
            # Python ints, so values near the int64 limits compare exactly.
            ints = np.array([p if p is not None else 0 for p in parsed], dtype=object)
            cached = self._ints[key] = (ints, ok)
        return cached

    # -- matching -----------------------------------------------------------------------------------

    def requirement(self, req: Requirement, field: bool = False) -> np.ndarray:
        """Nodes ``req`` matches (all False when Kubernetes could not parse it)."""
        key = (req, field)
        mask = self._req_masks.get(key)
        if mask is None:
            mask = self._req_masks[key] = self._requirement(req, field)
        return mask

    def _requirement(self, req: Requirement, field: bool) -> np.ndarray:
        if requirement_problem(req, field) is not None:
            return np.zeros(self.n, dtype=bool)
        if field:
            # Kubernetes' field selector reads a field a node does not have as "".
            name = req.values[0]
            equal = np.array([(n.name if req.key == NODE_NAME_FIELD else "") == name for n in self.nodes], dtype=bool)
            return equal if req.operator == "In" else ~equal
        codes, table = self.codes(req.key)
        op = req.operator
        if op == "Exists":
            return codes >= 0
        if op == "DoesNotExist":
            return codes < 0
        if op in ("In", "NotIn"):
            values = set(req.values)
            wanted = [i for i, v in enumerate(table) if v in values]
            if not wanted:  # no node has any of the values (a tenant's made-up ones cost nothing)
                inside = np.zeros(self.n, dtype=bool)
            elif len(wanted) == 1:
                inside = codes == wanted[0]
            else:
                inside = np.isin(codes, np.array(wanted, dtype=np.int32))
            return inside if op == "In" else ~inside
        ints, ok = self._integers(req.key)
        bound = parse_int64(req.values[0])
        assert bound is not None
        compare = (ints > bound) if op == "Gt" else (ints < bound)
        return ok & compare.astype(bool)

    def term(self, term: NodeSelectorTerm) -> np.ndarray:
        """Nodes matching every requirement of ``term``; none for an empty term."""
        mask = self._term_masks.get(term)
        if mask is None:
            if not term.match_expressions and not term.match_fields:
                mask = np.zeros(self.n, dtype=bool)
            else:
                mask = np.ones(self.n, dtype=bool)
                for req in term.match_expressions:
                    mask = mask & self.requirement(req)
                for req in term.match_fields:
                    mask = mask & self.requirement(req, field=True)
            self._term_masks[term] = mask
        return mask

    def required(self, terms: tuple[NodeSelectorTerm, ...]) -> np.ndarray:
        """Nodes matching at least one of ``terms`` (OR-ed); none for an empty tuple."""
        mask = self._required.get(terms)
        if mask is None:
            mask = np.zeros(self.n, dtype=bool)
            for term in terms:
                mask = mask | self.term(term)
            self._required[terms] = mask
        return mask

    def preferred(self, terms: tuple[PreferredTerm, ...], nodes: np.ndarray) -> np.ndarray:
        """Per node of ``nodes`` the sum of the weights of the terms it matches."""
        total = np.zeros(len(nodes), dtype=np.float64)
        for term in terms:
            if term.weight == 0 or (not term.preference.match_expressions and not term.preference.match_fields):
                continue
            total += term.weight * self.term(term.preference)[nodes]
        return total


def by_max(raw: np.ndarray) -> np.ndarray:
    """kube-scheduler's default normalisation: each score over the highest (all zero when it is 0)."""
    if len(raw) == 0:
        return raw
    top = raw.max()
    return raw / top if top > 0 else np.zeros_like(raw)


def preferred_terms_of(labels: tuple[tuple[str, str, int], ...]) -> tuple[PreferredTerm, ...]:
    """``Workload.preferred_labels`` as the preferred terms they are: ``key In [value]`` with a weight."""
    return tuple(
        PreferredTerm(weight, NodeSelectorTerm((Requirement(key, "In", (value,)),))) for key, value, weight in labels
    )


# -- words --------------------------------------------------------------------------------------------


def requirement_text(req: Requirement) -> str:
    """``gpu-type In [A100, H100]``, ``gpu-count Gt 4``, ``spot DoesNotExist``."""
    if req.operator in ("Exists", "DoesNotExist"):
        return f"{req.key} {req.operator}"
    if req.operator in ("Gt", "Lt") and len(req.values) == 1:
        return f"{req.key} {req.operator} {req.values[0]}"
    return f"{req.key} {req.operator} [{', '.join(req.values)}]"


def term_text(term: NodeSelectorTerm) -> str:
    parts = [requirement_text(r) for r in (*term.match_expressions, *term.match_fields)]
    return " and ".join(parts) if parts else "(an empty term, which matches nothing)"


def terms_text(terms: tuple[NodeSelectorTerm, ...], limit: int = 300) -> str:
    """The required terms as a sentence: ``a In [x] and b Exists`` or ``(…) or (…)``, at most
    ``limit`` characters."""
    if not terms:
        return "(no terms, which matches nothing)"
    if len(terms) == 1:
        text = term_text(terms[0])
    else:
        parts: list[str] = []
        for t in terms:  # stop once past the limit: a long affinity is read in its first terms
            parts.append(f"({term_text(t)})")
            if sum(len(p) + 4 for p in parts) > limit:
                break
        text = " or ".join(parts)
    return text if len(text) <= limit else text[: limit - 1] + "…"
