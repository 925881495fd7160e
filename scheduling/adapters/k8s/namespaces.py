"""A team namespace's guard rails as Kubernetes objects: its ResourceQuota and LimitRange, and how a
live object differs from the one the portal wants. Pure: no ``kubernetes``, no Django.

The ResourceQuota caps what the namespace's pods may request at what the team's queues could ever
hold (nominal quota plus what they may borrow: ``QuotaBook.ceiling``), so nothing that bypasses the
portal (a pod created by hand in the namespace) gets more than the portal itself would admit:

- ``requests.nvidia.com/gpu``: whole GPUs, the sum of the ceilings over the GPU models of the team's
  ClusterQueues, rounded down;
- ``requests.nvidia.com/mig-<profile>``: for each MIG profile a queue's models offer, the slices its
  GPU ceiling admits (a slice charges its memory share of one GPU);
- ``requests.cpu`` / ``requests.memory``: the ceilings of queues that limit them (left out when any of
  the team's queues leaves them unlimited).

The LimitRange gives containers that set no resources the defaults the platform chose (settings
``K8S_LIMIT_DEFAULT`` / ``K8S_LIMIT_DEFAULT_REQUEST``); the portal's own pods set every resource they
use (``nvidia.com/gpu: 0`` included), so the defaults never change them.

Drift is compared by value: quantities as numbers (``1024Mi`` equals ``1Gi``), missing and extra
resources named.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal

from scheduling.adapters.k8s.resources import quantity

QUOTA_NAME = "gpu-portal-quota"
LIMITS_NAME = "gpu-portal-limits"
MANAGED_BY = ("app.kubernetes.io/managed-by", "gpu-portal")
RESOURCE_QUOTA = "ResourceQuota"
LIMIT_RANGE = "LimitRange"


@dataclass(frozen=True, slots=True)
class NamespaceObjects:
    """What one team namespace should hold: its quota's ``hard`` map and its container defaults."""

    namespace: str
    hard: tuple[tuple[str, str], ...]
    default: tuple[tuple[str, str], ...]
    default_request: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class ObjectReport:
    """One object of one namespace after a sync: whether it had drifted (and how), and what was done."""

    namespace: str
    kind: str  # ResourceQuota | LimitRange
    name: str
    drift: tuple[str, ...]  # empty = it matched
    action: str  # "none", "created", "replaced", or "failed: <why>"


def _metadata(namespace: str, name: str) -> dict:
    return {"name": name, "namespace": namespace, "labels": {MANAGED_BY[0]: MANAGED_BY[1]}}


def resource_quota_manifest(objects: NamespaceObjects) -> dict:
    return {
        "apiVersion": "v1",
        "kind": RESOURCE_QUOTA,
        "metadata": _metadata(objects.namespace, QUOTA_NAME),
        "spec": {"hard": dict(objects.hard)},
    }


def limit_range_manifest(objects: NamespaceObjects) -> dict:
    return {
        "apiVersion": "v1",
        "kind": LIMIT_RANGE,
        "metadata": _metadata(objects.namespace, LIMITS_NAME),
        "spec": {
            "limits": [
                {
                    "type": "Container",
                    "default": dict(objects.default),
                    "defaultRequest": dict(objects.default_request),
                }
            ]
        },
    }


def namespace_manifest(objects: NamespaceObjects, kind: str) -> dict:
    """The wanted object of ``kind`` (ResourceQuota or LimitRange)."""
    return resource_quota_manifest(objects) if kind == RESOURCE_QUOTA else limit_range_manifest(objects)


def cpu_quantity(milli: int) -> str:
    return f"{milli // 1000}" if milli % 1000 == 0 else f"{milli}m"


def memory_quantity(mib: int) -> str:
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


def _value(text: object) -> Decimal | None:
    try:
        return quantity(str(text))
    except ValueError:
        return None


def map_drift(what: str, live: Mapping[str, object] | None, want: Mapping[str, str]) -> list[str]:
    """How a live resource map differs from the wanted one, in words (empty when equal by value)."""
    live = dict(live or {})
    problems = []
    for resource in sorted(set(live) | set(want)):
        if resource not in live:
            problems.append(f"{what} {resource} missing (want {want[resource]})")
        elif resource not in want:
            problems.append(f"{what} {resource}={live[resource]} not set by the portal")
        elif _value(live[resource]) != _value(want[resource]):
            problems.append(f"{what} {resource}={live[resource]} (want {want[resource]})")
    return problems


def quota_drift(live: Mapping | None, objects: NamespaceObjects) -> list[str]:
    """Differences between a live ResourceQuota (None: absent) and the wanted one."""
    if live is None:
        return ["absent"]
    return map_drift("hard", (live.get("spec") or {}).get("hard"), dict(objects.hard))


def limit_range_drift(live: Mapping | None, objects: NamespaceObjects) -> list[str]:
    """Differences between a live LimitRange (None: absent) and the wanted one (its Container item)."""
    if live is None:
        return ["absent"]
    items = (live.get("spec") or {}).get("limits") or []
    containers = [item for item in items if item.get("type") == "Container"]
    problems = [] if len(items) == 1 else [f"{len(items)} limit items (want one, type Container)"]
    item = containers[0] if containers else {}
    problems += map_drift("default", item.get("default"), dict(objects.default))
    problems += map_drift("defaultRequest", item.get("defaultRequest"), dict(objects.default_request))
    return problems
