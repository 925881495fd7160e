"""Trace readers for the Alibaba ``openb`` format (and any CSV with the same columns).

Nodes: ``sn,cpu_milli,memory_mib,gpu,model``. Pods: ``name,cpu_milli,memory_mib,num_gpu,gpu_milli,
gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time``; ``gpu_spec`` lists the allowed
GPU models joined by ``|`` (empty = any). Missing optional columns default to empty/zero.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from scheduling.engine.frag import NodeArrays, PodShape

POD_COLUMNS = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")

# Replay-mode priority by QoS class: latency-sensitive first, best-effort last.
QOS_PRIORITY = {"LS": 3, "Guaranteed": 2, "Burstable": 1, "BE": 0}


@dataclass(frozen=True, slots=True)
class TraceNode:
    name: str
    cpu_milli: int
    memory_mib: int
    gpu_count: int
    gpu_model: str | None


@dataclass(frozen=True, slots=True)
class TracePod:
    name: str
    cpu_milli: int
    memory_mib: int
    gpu_count: int  # 0 = CPU-only
    gpu_milli: int  # per device; < 1000 only with gpu_count == 1 (a share of one device)
    allowed_models: tuple[str, ...] = ()
    qos: str = ""
    creation_time_s: float = 0.0
    deletion_time_s: float | None = None

    @property
    def total_gpu_milli(self) -> int:
        return self.gpu_count * self.gpu_milli

    @property
    def priority(self) -> int:
        return QOS_PRIORITY.get(self.qos, 1)

    def request(self) -> PodShape:
        """What the pod asks for, as the placement policies see it."""
        return PodShape(
            cpu_milli=self.cpu_milli,
            memory_mib=self.memory_mib,
            gpu_milli=self.gpu_milli,
            gpu_count=self.gpu_count,
            allowed_models=self.allowed_models,
        )

    def shape(self) -> tuple[int, int, int, tuple[str, ...]]:
        """The resource shape FGD's typical-pod table is keyed by."""
        return (self.cpu_milli, self.gpu_milli, self.gpu_count, self.allowed_models)


def _int(value: str | None) -> int:
    return int(float(value)) if value not in (None, "") else 0


def read_nodes(path: str | Path) -> list[TraceNode]:
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        missing = set(NODE_COLUMNS) - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"{path}: node list lacks columns {sorted(missing)}")
        return [
            TraceNode(
                name=row["sn"],
                cpu_milli=_int(row["cpu_milli"]),
                memory_mib=_int(row["memory_mib"]),
                gpu_count=_int(row["gpu"]),
                gpu_model=row["model"] or None,
            )
            for row in reader
        ]


def read_pods(path: str | Path) -> list[TracePod]:
    """Read a pod list. A pod with ``num_gpu > 0`` but ``gpu_milli == 0`` is read as whole GPUs."""
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        missing = {"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"} - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"{path}: pod list lacks columns {sorted(missing)}")
        pods = []
        for row in reader:
            num = _int(row["num_gpu"])
            milli = _int(row["gpu_milli"]) if num > 0 else 0
            if num > 0 and milli == 0:
                milli = 1000
            if num > 1 and milli < 1000:
                raise ValueError(f"{path}: pod {row['name']} shares {num} GPUs; only one GPU can be shared")
            deletion = row.get("deletion_time") or ""
            pods.append(
                TracePod(
                    name=row["name"],
                    cpu_milli=_int(row["cpu_milli"]),
                    memory_mib=_int(row["memory_mib"]),
                    gpu_count=num,
                    gpu_milli=milli,
                    allowed_models=tuple(m for m in (row.get("gpu_spec") or "").split("|") if m),
                    qos=row.get("qos") or "",
                    creation_time_s=float(row.get("creation_time") or 0),
                    deletion_time_s=float(deletion) if deletion else None,
                )
            )
        return pods


def write_pods(path: str | Path, pods: Iterable[TracePod]) -> None:
    """Write pods in the openb format (used by the variant generator and tests)."""
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(POD_COLUMNS)
        for p in pods:
            writer.writerow(
                [
                    p.name,
                    p.cpu_milli,
                    p.memory_mib,
                    p.gpu_count,
                    p.gpu_milli,
                    "|".join(p.allowed_models),
                    p.qos,
                    "Running",
                    int(p.creation_time_s),
                    "" if p.deletion_time_s is None else int(p.deletion_time_s),
                    int(p.creation_time_s),
                ]
            )


def write_nodes(path: str | Path, nodes: Iterable[TraceNode]) -> None:
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(NODE_COLUMNS)
        for n in nodes:
            writer.writerow([n.name, n.cpu_milli, n.memory_mib, n.gpu_count, n.gpu_model or ""])


def node_arrays(nodes: Iterable[TraceNode]) -> NodeArrays:
    return NodeArrays.of((n.name, n.gpu_model, n.gpu_count, n.cpu_milli, n.memory_mib) for n in nodes)
