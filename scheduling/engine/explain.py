"""Reasons with numbers: why a job did not start, worded in one place (estimated starts: ``estimate``)."""

from __future__ import annotations

from .model import Reason, ReasonKind


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
        ),
    )


def _resource_words(resource: str) -> tuple[str, int, str]:
    if resource.startswith("gpu/"):
        return resource[4:] + " GPUs", 1000, ""
    if resource == "cpu":
        return "CPU cores", 1000, ""
    return "GiB memory", 1024, ""


def _fmt(value: int, scale: int) -> str:
    return f"{value / scale:g}"


def placement_reason(
    total: int, fitting: int, counts: tuple[tuple[str, int], ...], prefix: str = "placement"
) -> Reason:
    parts = ", ".join(f"{n} {what}" for what, n in counts)
    message = f"{prefix}: {fitting} of {total} nodes fit" + (f": {parts}" if parts else "")
    details: tuple[tuple[str, int | float | str], ...] = (("nodes", total), ("fit", fitting), *counts)
    return Reason(ReasonKind.PLACEMENT, message, details)


def gang_reason(placed: int, needed: int, total: int, counts: tuple[tuple[str, int], ...], within: str = "") -> Reason:
    """``within``: where the gang must be, e.g. ``one rack (topology.kubernetes.io/rack)``."""
    inner = placement_reason(total, 0, counts, prefix="next replica")
    where = f" in {within}" if within else ""
    message = (
        f"gang: only {placed} of {needed} replicas fit{where} and all {needed} must start together{where}; "
        f"{inner.message}"
    )
    return Reason(ReasonKind.GANG, message, (("placed", placed), ("needed", needed), *inner.details))
