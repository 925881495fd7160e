"""Kubernetes resource quantities, and what a pod requests. Pure: no ``kubernetes``, no Django.

- ``quantity`` parses a quantity (``3800m``, ``16Gi``, ``2``, ``1e3``); ``cpu_milli_of`` and
  ``memory_mib_of`` convert one to the engine's units, rounding down.
- ``mig_resources`` reads the MIG slices a resource map offers (``nvidia.com/mig-<profile>``).
- ``pod_request`` is a pod's effective request: the sum over its containers, or its largest init
  container where that is larger; a resource given as a limit only is requested at the limit.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal

GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"

_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")
_SUFFIX = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}


def quantity(value: str | int | float | None) -> Decimal:
    """Parse a Kubernetes quantity (``3800m``, ``16Gi``, ``2``, ``1e3``). Raises ValueError if malformed."""
    if value is None or value == "":
        return Decimal(0)
    if isinstance(value, int | float):
        return Decimal(str(value))
    match = _QUANTITY.match(value.strip())
    if match is None or match.group(2) not in _SUFFIX:
        raise ValueError(f"{value!r} is not a Kubernetes quantity")
    return Decimal(match.group(1)) * _SUFFIX[match.group(2)]


def cpu_milli_of(value: str | int | None) -> int:
    return int(quantity(value) * 1000)


def memory_mib_of(value: str | int | None) -> int:
    return int(quantity(value) / Decimal(2**20))


def mig_resources(allocatable: Mapping[str, str]) -> dict[str, int]:
    return {
        key[len(MIG_RESOURCE_PREFIX) :]: int(quantity(value))
        for key, value in allocatable.items()
        if key.startswith(MIG_RESOURCE_PREFIX) and int(quantity(value)) > 0
    }


@dataclass(frozen=True, slots=True)
class PodRequest:
    gpus: int
    mig: tuple[tuple[str, int], ...]
    cpu_milli: int
    memory_mib: int


def pod_request(pod: Mapping) -> PodRequest:
    """Effective request of a pod: the sum over containers, or the largest init container if larger.

    Extended resources (GPUs, MIG slices) may be given as limits only; requests default to limits.
    """

    def one(container: Mapping) -> tuple[Decimal, Decimal, Decimal, dict[str, Decimal]]:
        resources = container.get("resources") or {}
        requests = dict(resources.get("limits") or {})
        requests.update(resources.get("requests") or {})
        mig = {
            k[len(MIG_RESOURCE_PREFIX) :]: quantity(v) for k, v in requests.items() if k.startswith(MIG_RESOURCE_PREFIX)
        }
        return (
            quantity(requests.get(GPU_RESOURCE)),
            quantity(requests.get("cpu")),
            quantity(requests.get("memory")),
            mig,
        )

    spec = pod.get("spec") or {}
    gpus = cpu = memory = Decimal(0)
    mig: dict[str, Decimal] = defaultdict(Decimal)
    for container in spec.get("containers") or []:
        g, c, m, s = one(container)
        gpus, cpu, memory = gpus + g, cpu + c, memory + m
        for key, value in s.items():
            mig[key] += value
    for container in spec.get("initContainers") or []:
        g, c, m, s = one(container)
        gpus, cpu, memory = max(gpus, g), max(cpu, c), max(memory, m)
        for key, value in s.items():
            mig[key] = max(mig[key], value)
    return PodRequest(
        gpus=int(gpus),
        mig=tuple(sorted((k, int(v)) for k, v in mig.items() if v)),
        cpu_milli=int(cpu * 1000),
        memory_mib=int(memory / Decimal(2**20)),
    )
