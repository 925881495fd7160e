"""A Ray job's spec (``Job.ray``): its rules, and its pods as the engine's pod sets. Pure: no Django.

A Ray job (``kind: ray``) is a Ray cluster: a head and one or more worker groups, admitted as one gang
(``scheduling.engine.podsets``). The job's own resources (``gpu``, ``cpu_milli``, ``memory_mib``, one
replica) are the head's; ``ray`` holds the rest::

    {"mode": "job",                      # job: a RayJob running entrypoint; cluster: a RayCluster
     "entrypoint": "python train.py",    # a RayJob's command (none for a RayCluster)
     "worker_groups": [{"name": "gpu", "replicas": 4, "gpu": 2, "cpu_milli": 8000, "memory_mib": 65536}]}

Placements are in pod order: the head (replica 0), then each group's workers in turn.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduling.engine.model import PodSet, Resources

MODES = ("job", "cluster")
GROUP_FIELDS = ("name", "replicas", "gpu", "cpu_milli", "memory_mib")
MAX_GROUPS = 8
MAX_ENTRYPOINT_CHARS = 4096
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$")  # a DNS label short enough for pod names
# The group's bounds: (field, least, most, default).
_BOUNDS: dict[str, tuple[int, int, int]] = {
    "replicas": (1, 1024, 1),
    "gpu": (0, 64, 0),
    "cpu_milli": (1, 1024 * 1000, 1000),
    "memory_mib": (1, 16 * 1024 * 1024, 4096),
}
MAX_PODS = 1024


@dataclass(frozen=True, slots=True)
class WorkerGroup:
    name: str
    replicas: int
    gpu: int
    cpu_milli: int
    memory_mib: int


class RaySpecError(ValueError):
    """A Ray spec that cannot run; ``field`` is the dotted path at fault (``ray.worker_groups.0.gpu``)."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


def ray_mode(ray: Mapping[str, Any]) -> str:
    return str(ray.get("mode") or "job")


def worker_groups(ray: Mapping[str, Any]) -> tuple[WorkerGroup, ...]:
    """The worker groups of a valid spec (``ray_spec_check``), defaults filled in."""
    return tuple(
        WorkerGroup(
            name=str(g["name"]),
            **{key: int(g.get(key, default)) for key, (_, _, default) in _BOUNDS.items()},
        )
        for g in ray.get("worker_groups") or ()
    )


def pod_sets(ray: Mapping[str, Any] | None) -> tuple[PodSet, ...] | None:
    """The engine's further pod sets of a Ray job: one per worker group (empty for any other job);
    None for a stored spec the submit path would have refused (edited by hand in the admin)."""
    if not ray:
        return ()
    try:
        ray_spec_check(ray, replicas=1, min_available=0, fractional="")
    except RaySpecError:
        return None
    return tuple(
        PodSet(g.name, g.replicas, Resources(gpu=g.gpu, cpu_milli=g.cpu_milli, memory_mib=g.memory_mib))
        for g in worker_groups(ray)
    )


def ray_spec_check(ray: object, *, replicas: int, min_available: int, fractional: str) -> None:
    """Raise :class:`RaySpecError` naming the field when a Ray job's spec cannot run.

    ``replicas`` and ``min_available`` are the job's (the head is one pod, the gang is whole);
    ``fractional`` names a GPU request of the head other than whole GPUs ("" when none)."""
    if not isinstance(ray, Mapping):
        raise RaySpecError("a Ray job needs ray: an object with mode, entrypoint and worker_groups", "ray")
    if replicas != 1:
        raise RaySpecError(
            "a Ray job's own pod is its head: leave replicas at 1 (workers go in ray.worker_groups)", "replicas"
        )
    if min_available:
        raise RaySpecError(
            "a Ray cluster starts whole (head and every worker) or not at all: leave it at 0", "min_available"
        )
    if fractional:
        raise RaySpecError("a Ray head takes whole GPUs (gpu) or none", fractional)
    unknown = sorted(set(ray) - {"mode", "entrypoint", "worker_groups"})
    if unknown:
        raise RaySpecError("unknown field (mode, entrypoint, worker_groups)", f"ray.{unknown[0]}")
    mode = ray.get("mode", "job")
    if mode not in MODES:
        raise RaySpecError(f"{mode!r} is not job (a RayJob) or cluster (a RayCluster)", "ray.mode")
    _entrypoint_check(ray.get("entrypoint", ""), mode)
    groups = ray.get("worker_groups")
    if not isinstance(groups, list) or not 1 <= len(groups) <= MAX_GROUPS:
        raise RaySpecError(f"a list of 1 to {MAX_GROUPS} worker groups", "ray.worker_groups")
    names: set[str] = set()
    pods = 1
    for index, group in enumerate(groups):
        pods += _group_check(group, f"ray.worker_groups.{index}", names)
    if pods > MAX_PODS:
        raise RaySpecError(f"at most {MAX_PODS} pods in all, head included (got {pods})", "ray.worker_groups")


def _entrypoint_check(entrypoint: object, mode: object) -> None:
    if not isinstance(entrypoint, str):
        raise RaySpecError("a string (the command the RayJob runs)", "ray.entrypoint")
    if mode == "job" and not entrypoint.strip():
        raise RaySpecError("a RayJob needs the command it runs, e.g. python train.py", "ray.entrypoint")
    if mode == "cluster" and entrypoint:
        raise RaySpecError("a RayCluster runs no entrypoint: use mode job, or leave it empty", "ray.entrypoint")
    if len(entrypoint) > MAX_ENTRYPOINT_CHARS or any(ch in entrypoint for ch in "\x00"):
        raise RaySpecError(f"at most {MAX_ENTRYPOINT_CHARS} characters, no NUL", "ray.entrypoint")


def _group_check(group: object, path: str, names: set[str]) -> int:
    """One worker group's rules; its worker count."""
    if not isinstance(group, Mapping):
        raise RaySpecError(f"an object with {', '.join(GROUP_FIELDS)}", path)
    unknown = sorted(set(group) - set(GROUP_FIELDS))
    if unknown:
        raise RaySpecError(f"unknown field ({', '.join(GROUP_FIELDS)})", f"{path}.{unknown[0]}")
    name = group.get("name")
    if not isinstance(name, str) or not _NAME.match(name) or name == "head":
        raise RaySpecError("1-40 of [a-z0-9-], starting and ending alphanumeric, not 'head'", f"{path}.name")
    if name in names:
        raise RaySpecError(f"two worker groups are named {name!r}", f"{path}.name")
    names.add(name)
    for key, (least, most, default) in _BOUNDS.items():
        value = group.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
            raise RaySpecError(f"an integer from {least} to {most}", f"{path}.{key}")
    return int(group.get("replicas", 1))
