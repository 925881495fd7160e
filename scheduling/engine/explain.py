"""Reasons with numbers: why a job did not start, worded in one place (estimated starts: ``estimate``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import numpy as np

from .capacity import FULL, Cluster
from .filters import CPU, FIT, GPUS, MEMORY
from .fit import Shape, gpu_fits
from .mig import COMPUTE_SLICES
from .model import Reason, ReasonKind, Workload
from .preemption import Victim
from .quota import QuotaBook
from .windows import StartWindow
from .windows import describe as describe_window

Details = tuple[tuple[str, int | float | str], ...]


def quota_reason(
    cq: str,
    cohort: str,
    resource: str,
    used: int,
    nominal: int,
    requested: int,
    borrowable: int,
) -> Reason:
    name, scale, unit = _resource_words(resource)
    message = (
        f"quota: queue {cq} uses {_fmt(used, scale)} of {_fmt(nominal, scale)} {unit}{name}"
        f" and needs {_fmt(requested, scale)} more"
    )
    if cohort and used + requested <= nominal:
        # Within its nominal quota and still no room: other queues of the cohort borrow the rest.
        lent = nominal - used
        message += f"; {_fmt(lent, scale)} of its nominal quota is lent to other queues of cohort {cohort}"
        message += " and in use (it returns as their jobs finish)"
    else:
        message += f"; cohort {cohort} has {_fmt(borrowable, scale)} borrowable" if cohort else "; no cohort"
    return Reason(
        ReasonKind.QUOTA,
        message,
        (
            ("cluster_queue", cq),
            ("resource", resource),
            ("used", used),
            ("nominal", nominal),
            ("requested", requested),
            ("borrowable", borrowable),
            ("waits_for", "quota"),
        ),
    )


def _resource_words(resource: str) -> tuple[str, int, str]:
    if resource.startswith("gpu/"):
        return resource[4:] + " GPUs", 1000, ""
    if resource == "cpu":
        return "CPU cores", 1000, ""
    return "GiB memory", 1024, ""


def _fmt(value: int, scale: int) -> str:
    """``value / scale`` exactly as far as three decimals go (``976562.5``, ``0.25``, ``8``)."""
    return f"{value / scale:.3f}".rstrip("0").rstrip(".")


def placement_reason(total: int, explanation: Explanation, prefix: str = "placement") -> Reason:
    """``placement: F of N nodes fit: <counts>; <what is short, with its numbers>``."""
    counts = explanation.counts
    parts = ", ".join(f"{n} {what}" for what, n in counts)
    message = f"{prefix}: {explanation.fit} of {total} nodes fit" + (f": {parts}" if parts else "")
    details: Details = (("nodes", total), ("fit", explanation.fit), *counts)
    short = explanation.short
    if short is not None:
        message += f"; {short.text}"
        details += short.details
    return Reason(ReasonKind.PLACEMENT, message, details)


def gang_reason(placed: int, needed: int, total: int, explanation: Explanation, within: str = "") -> Reason:
    """``within``: where the gang must be, e.g. ``one rack (topology.kubernetes.io/rack)``."""
    inner = placement_reason(total, explanation, prefix="next replica")
    where = f" in {within}" if within else ""
    message = (
        f"gang: only {placed} of {needed} replicas fit{where} and all {needed} must start together{where}; "
        f"{inner.message}"
    )
    return Reason(ReasonKind.GANG, message, (("placed", placed), ("needed", needed), *inner.details))


@dataclass(frozen=True, slots=True)
class Shortage:
    """The resource one more replica is short of on the nodes that pass the static filters.

    ``nodes`` counts the nodes short of it; ``details`` holds ``resource``, ``needed``,
    ``most_free_on_one_node``, ``free_in_all`` (engine units) and ``waits_for``: ``fragmentation`` when
    enough is free in all but not on one node (or one device), ``capacity`` when it is in use.
    """

    nodes: int
    text: str
    details: Details


@dataclass(frozen=True, slots=True)
class Explanation:
    """Why one more replica does not go anywhere (``placement.Placer.explain``): how many nodes fit,
    the nodes counted by the first filter that rejects them (largest count first), and the resource
    the nodes that pass the static filters are short of, with its numbers (``None``: none is short)."""

    fit: int
    counts: tuple[tuple[str, int], ...]
    short: Shortage | None = None


NO_EXPLANATION = Explanation(0, ())


def shortage(cluster: Cluster, shape: Shape, nodes: np.ndarray, codes: np.ndarray) -> Shortage | None:
    """The resource most of ``nodes`` (one GPU model's, with their explanation ``codes``) are short of
    (GPUs first on ties), or ``None`` when none is short.

    Its numbers are taken over the *eligible* nodes: those that pass the static filters and have room
    for the rest of the replica (all that pass the filters when none has), so "at most X free on an
    eligible node" is the true best the job could get of that resource now.
    """
    counts = np.bincount(codes, minlength=MEMORY + 1)  # one pass for the three counts
    short_of = {code: int(counts[code]) for code in (GPUS, CPU, MEMORY)}
    code = max(short_of, key=lambda c: short_of[c])
    if not short_of[code]:
        return None
    # Fit or short of a resource: FIT, or GPUS..MEMORY (consecutive codes; ``np.isin`` costs more).
    passing = nodes[(codes == FIT) | ((codes >= GPUS) & (codes <= MEMORY))]
    room = {
        GPUS: gpu_fits(cluster, shape, passing),
        CPU: cluster.cpu_free[passing] >= shape.cpu_milli,
        MEMORY: cluster.mem_free[passing] >= shape.memory_mib,
    }
    rest = np.ones(len(passing), dtype=bool)
    for other, ok in room.items():
        if other != code:
            rest &= ok
    eligible = passing[rest] if rest.any() else passing
    if code in (CPU, MEMORY):
        if code == CPU:
            key, need, free, scale, unit, noun = "cpu", shape.cpu_milli, cluster.cpu_free, FULL, "", "CPU cores"
        else:
            key, need, free, scale, unit, noun = "memory", shape.memory_mib, cluster.mem_free, 1024, " GiB", "memory"
        most, total = _most_and_total(free[eligible])
        text = (
            f"needs {_fmt(need, scale)}{unit} free {noun} on one node; eligible nodes have at most "
            f"{_fmt(most, scale)}{unit} free each and {_fmt(total, scale)}{unit} in all"
        )
    else:
        key = f"gpu/{shape.gpu_model}"
        _, total = _most_and_total(cluster.gpu_free_total[eligible])
        if shape.mig is not None:
            # Fragmentation: a device with enough free compute and memory slices, none at a valid start.
            need, most = shape.mig.gpu_milli, 0
            free_slices = np.zeros(cluster.mig_mask[eligible].shape, dtype=np.int64)
            for bit in range(8):
                free_slices += ((cluster.mig_mask[eligible] >> bit) & 1) == 0
            exists = np.arange(cluster.width)[None, :] < cluster.gpu_count[eligible][:, None]
            room = exists & (cluster.mig_compute[eligible] + shape.mig.compute <= COMPUTE_SLICES)
            scattered = int(np.count_nonzero(room & (free_slices >= shape.mig.memory_slices)))
            total = need if scattered else 0
            text = f"needs a free {shape.mig.profile} slice; no GPU of an eligible node has one at a valid start"
            if scattered:
                text += f", {_count(scattered, 'GPU')} with enough free slices but not at a valid start"
        elif shape.gpus:
            need = shape.gpus * FULL
            most = int(cluster.full_free[eligible].max(initial=0)) * FULL
            text = (
                f"needs {_count(shape.gpus, f'free {shape.gpu_model} GPU')} on one node; eligible nodes have at most "
                f"{most // FULL} free each and {_fmt(total, FULL)} in all"
            )
        else:
            need = shape.milli
            most = int(cluster.max_share[eligible].max(initial=0))
            text = (
                f"needs {_fmt(need, FULL)} of one {shape.gpu_model} GPU; eligible nodes' GPUs have at most "
                f"{_fmt(most, FULL)} free each and {_fmt(total, FULL)} in all"
            )
    waits_for = "fragmentation" if total >= need else "capacity"
    text += " (fragmentation)" if total >= need else " (capacity in use)"
    details: Details = (
        ("resource", key),
        ("needed", need),
        ("most_free_on_one_node", most),
        ("free_in_all", total),
        ("waits_for", waits_for),
    )
    return Shortage(short_of[code], text, details)


def _most_and_total(free: np.ndarray) -> tuple[int, int]:
    clipped = np.clip(free, 0, None)
    return int(clipped.max(initial=0)), int(clipped.sum())


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


# -- never fits as configured (``verdict``) ---------------------------------------------------------

NEVER = "never fits as configured"


def _never(kind: ReasonKind, limit: str, text: str, details: Details) -> Reason:
    return Reason(kind, f"{kind.value}: {NEVER}: {text}", (("limit", limit), *details), waits=False)


def amount_words(resource: str, amount: int) -> str:
    """``amount`` of a resource key in words: ``16 A100-80GB GPUs``, ``200 CPU cores``, ``100 GiB memory``."""
    name, scale, _ = _resource_words(resource)
    if amount == scale and name.endswith("s"):
        name = name[:-1]
    return f"{_fmt(amount, scale)} {name}"


def no_quota_reason(cq: str, wanted: str) -> Reason:
    return _never(ReasonKind.QUOTA, "no_quota", f"queue {cq} has no quota for {wanted}", (("cluster_queue", cq),))


def ceiling_reason(cq: str, cohort: str, resource: str, needed: int, nominal: int, ceiling: int) -> Reason:
    """The gang needs more of ``resource`` than its queue may ever hold (nominal plus borrowing)."""
    _, scale, _ = _resource_words(resource)
    if cohort:
        parts = f"nominal {_fmt(nominal, scale)} + {_fmt(ceiling - nominal, scale)} it may borrow in cohort {cohort}"
    else:
        parts = "its nominal quota; no cohort to borrow from"
    most = _fmt(ceiling, scale)
    text = f"needs {amount_words(resource, needed)} at once and queue {cq} may hold at most {most} ({parts})"
    details = (
        ("cluster_queue", cq),
        ("resource", resource),
        ("needed", needed),
        ("nominal", nominal),
        ("ceiling", ceiling),
    )
    return _never(ReasonKind.QUOTA, "queue_ceiling", text, details)


def absent_model_reason(model: str, present: tuple[str, ...]) -> Reason:
    have = ", ".join(present) if present else "no GPU nodes"
    text = f"no node has GPU model {model} (the cluster has {have})"
    return _never(ReasonKind.PLACEMENT, "absent_model", text, (("gpu_model", model),))


def node_words(model: str | None) -> str:
    """``A100-80GB node`` for a GPU model's nodes, ``node`` for CPU-only work (any node)."""
    return f"{model} node" if model else "node"


def filtered_reason(model: str | None, total: int, counts: tuple[tuple[str, int], ...]) -> Reason:
    """Every node of the model is refused by a filter that no cycle changes (selector, taints, MIG mode)."""
    parts = ", ".join(f"{n} {why}" for why, n in counts)
    text = f"none of the {_count(total, node_words(model))} passes the job's filters: {parts}"
    return _never(ReasonKind.PLACEMENT, "node_filters", text, (("nodes", total), *counts))


def largest_node_reason(model: str | None, short: list[tuple[str, int, int]], together: bool) -> Reason:
    """One replica is bigger than every node that passes the filters. ``short``: per resource key
    (``gpu/<model>``, ``cpu``, ``memory``) the replica's need and the most any such node has."""
    if together:
        needs = ", ".join(amount_words(key, need) for key, need, _ in short)
        text = f"one replica needs {needs} on one node and no {node_words(model)} has all of them"
    else:
        key, need, most = short[0]
        _, scale, _ = _resource_words(key)
        largest = _fmt(most, scale)
        text = f"one replica needs {amount_words(key, need)} and the largest {node_words(model)} has {largest}"
    details: tuple[tuple[str, int | float | str], ...] = (
        ("resource", short[0][0]),
        ("needed", short[0][1]),
        ("largest", short[0][2]),
    )
    return _never(ReasonKind.PLACEMENT, "largest_node", text, details)


def mig_slots_reason(model: str | None, profile: str) -> Reason:
    text = f"no {node_words(model)} has room for a {profile} slice on any GPU"
    return _never(ReasonKind.PLACEMENT, "mig_partition", text, (("mig_profile", profile),))


def cluster_total_reason(model: str | None, needed: int, most: int, nodes: int) -> Reason:
    """The gang's replicas must start together and all the nodes that could hold one hold fewer."""
    text = (
        f"all {needed} replicas must start together and the {_count(nodes, node_words(model))} that could run one "
        f"hold at most {most} of them with nothing else running"
    )
    return _never(ReasonKind.GANG, "cluster_total", text, (("needed", needed), ("most", most), ("nodes", nodes)))


def one_domain_reason(model: str | None, needed: int, most: int, where: str, anti: list[str]) -> Reason:
    """A gang that must be in one domain and no domain holds it, even empty."""
    apart = f" with one replica per {' / '.join(anti)}" if anti else ""
    text = (
        f"all {needed} replicas must start together in {where}{apart} and the {node_words(model)}s of any one hold "
        f"at most {most} of them with nothing else running"
    )
    return _never(ReasonKind.GANG, "one_domain", text, (("needed", needed), ("most", most)))


def anti_affinity_reason(model: str | None, needed: int, most: int, anti: list[str]) -> Reason:
    """A gang whose required anti-affinity leaves fewer domains than replicas, even empty."""
    text = (
        f"all {needed} replicas must start together with at most one per {' / '.join(anti)} (pod anti-affinity) "
        f"and the {node_words(model)}s allow at most {most} of them"
    )
    return _never(ReasonKind.GANG, "anti_affinity", text, (("needed", needed), ("most", most)))


def catalogue_reason(problem: str) -> Reason:
    return _never(ReasonKind.PLACEMENT, "catalogue", problem, ())


def invalid_reason(problem: str) -> Reason:
    return Reason(ReasonKind.INVALID, f"invalid: {problem}", (("limit", "invalid"),), waits=False)


def per_model_reason(reasons: list[tuple[str, Reason]]) -> Reason:
    """One reason from each GPU model's: the job never fits on any of them."""
    if len(reasons) == 1:
        return reasons[0][1]
    first = reasons[0][1]
    parts = []
    for model, reason in reasons:
        text = reason.message.split(f"{NEVER}: ", 1)[-1]
        parts.append(f"on {model}: {text}")
    message = f"{first.kind.value}: {NEVER}: " + "; ".join(parts)
    models = ",".join(model for model, _ in reasons)
    return Reason(first.kind, message, (*first.details, ("gpu_models", models)), waits=False)


def window_reason(window: StartWindow, opens_s: float) -> Reason:
    """A job outside its start window: when it opens (it waits; the estimated start is the opening)."""
    opens = datetime.fromtimestamp(opens_s, UTC)
    if window.daily:
        message = f"waits for its start window ({describe_window(window)}): opens at {opens:%Y-%m-%d %H:%M} UTC"
    else:  # only a start time: the window is its opening
        message = f"waits for its start window: not before {opens:%Y-%m-%d %H:%M} UTC"
    return Reason(ReasonKind.WINDOW, message, (("opens_at", opens_s), ("waits_for", "window")))


def protected_reason(reason: Reason, victims: list[str], until_s: float, now: float) -> Reason:
    """``reason`` plus the jobs it would preempt once they have run their priority class's minimum
    runtime (KAI's preemption delay), and when that is."""
    minutes = max(1, math.ceil((until_s - now) / 60))
    they = "it has" if len(victims) == 1 else "they have"
    message = (
        f"{reason.message}; would preempt {', '.join(victims)} once {they} run the minimum runtime of "
        f"{'its' if len(victims) == 1 else 'their'} priority class (in {minutes} min)"
    )
    details = (*reason.details, ("preempts_after", until_s), ("protected", ", ".join(victims)))
    return replace(reason, message=message, details=details, waits=True)


def preemption_why(job: Workload, cq: str, victim: Victim, count: int) -> str:
    """Why ``victim`` is preempted for ``job`` (of ClusterQueue ``cq``), one of ``count`` victims: the
    kind of preemption and the rule that chose it."""
    w = victim.holder.workload
    if victim.kind == "priority":
        why = f"priority: {job.id} (priority {job.priority}) outranks it (priority {w.priority})"
    elif victim.kind == "serving":
        why = (
            f"serving: inference replica {job.id} (priority {job.priority}) preempts training of lower "
            f"priority (priority {w.priority}; INFERENCE_PREEMPTS_TRAINING)"
        )
    else:
        why = f"reclaim: queue {cq} reclaims quota that queue {victim.holder.cq} borrowed"
    return why + (
        f"; rule: least-work minimal victim set (lowest priority, then fewest GPU-seconds lost, then "
        f"youngest; {count} victim(s)); it loses {victim.lost_gpu_milli_s / 1000:.0f} GPU-seconds"
    )


def quota_shortfall(book: QuotaBook, cq: str, cohort: str, request: dict[str, int]) -> Reason:
    """The quota reason of the first resource of ``request`` the queue ``cq`` has too little of now."""
    for key, amount in request.items():
        available = book.available(cq, key)
        if available is not None and amount > available:
            return quota_reason(
                cq, cohort, key, book.used(cq, key), book.nominal(cq, key) or 0, amount, book.borrowable(cq, key)
            )
    return Reason(ReasonKind.QUOTA, f"quota: queue {cq} has no room", (("cluster_queue", cq),))
