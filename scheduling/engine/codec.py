"""JSON codec for snapshots, policies and plans (the format is documented in docs/snapshot-format.md).

The mapping is mechanical, from the dataclasses in ``model.py``: field names are JSON keys, tuples are
lists, enums their string values, nested dataclasses objects. Three kinds of field are written as JSON
objects instead of lists of pairs because that is how people write them: label maps (``labels``,
``node_selector``), the snapshot's lookup tables (``teams_blocked``, ``mig_profiles``,
``gpu_memory_gib``, ``pool_placement``) and ``details`` / ``stats``. Fields equal to their default are
left out when writing and filled in when reading. Unknown keys are an error naming their path, so a
typo in a hand-written snapshot does not silently change a decision.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from enum import Enum
from typing import Any, TypeVar

from . import model
from .model import Plan, Policy, Snapshot

T = TypeVar("T")

_MAP_FIELDS = {
    "labels",
    "node_selector",
    "teams_blocked",
    "mig_profiles",
    "gpu_memory_gib",
    "pool_placement",
    "details",
    "stats",
}

_hints_cache: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _hints_cache:
        _hints_cache[cls] = typing.get_type_hints(cls, vars(model))
    return _hints_cache[cls]


class SnapshotFormatError(ValueError):
    """The JSON does not describe a valid snapshot; the message names the offending path."""


# -- encoding ---------------------------------------------------------------------------------------


def _encode(value: Any, name: str = "") -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(value):
            v = getattr(value, f.name)
            if f.default is not dataclasses.MISSING and v == f.default:
                continue
            if f.default_factory is not dataclasses.MISSING and v == f.default_factory():
                continue
            out[f.name] = _encode(v, f.name)
        return out
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, tuple):
        if name in _MAP_FIELDS:
            return {str(k): _encode(v) for k, v in value}
        return [_encode(v) for v in value]
    return value


def snapshot_to_json(snapshot: Snapshot) -> dict[str, Any]:
    """The snapshot as a JSON-ready dict (``json.dumps`` it)."""
    return typing.cast(dict[str, Any], _encode(snapshot))


def policy_to_json(policy: Policy) -> dict[str, Any]:
    return typing.cast(dict[str, Any], _encode(policy))


def plan_to_json(plan: Plan) -> dict[str, Any]:
    """The plan as a JSON-ready dict; every field is written, so readers need no defaults."""
    return {
        "admissions": [
            {
                "workload_id": a.workload_id,
                "gpu_model": a.gpu_model,
                "borrowed": a.borrowed,
                "placements": [_placement_json(p) for p in a.placements],
            }
            for a in plan.admissions
        ],
        "preemptions": [
            {"workload_id": p.workload_id, "preemptor_id": p.preemptor_id, "reason": p.reason} for p in plan.preemptions
        ],
        "pending": [
            {
                "workload_id": p.workload_id,
                "position": p.position,
                "estimated_start": p.estimated_start,
                "reason": reason_to_json(p.reason),
            }
            for p in plan.pending
        ],
        "stats": dict(plan.stats),
    }


def reason_to_json(reason: model.Reason) -> dict[str, Any]:
    """A reason as JSON: ``kind``, ``message``, ``details`` (an object) and ``waits`` (whether waiting
    can help: false for a job that never fits as configured). The portal stores this as a job's
    pending reason and the API shows it."""
    return {
        "kind": reason.kind.value,
        "message": reason.message,
        "details": dict(reason.details),
        "waits": reason.waits,
    }


def _placement_json(p: model.ReplicaPlacement) -> dict[str, Any]:
    return {
        "node": p.node,
        "gpu_indices": list(p.gpu_indices),
        "gpu_milli": p.gpu_milli,
        "mig_profile": p.mig_profile,
        "mig_slot": p.mig_slot,
        "cpu_milli": p.cpu_milli,
        "memory_mib": p.memory_mib,
    }


# -- decoding ---------------------------------------------------------------------------------------


def _decode(tp: Any, value: Any, path: str, name: str = "") -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return _decode(inner[0], value, path, name)
        for candidate in inner:  # int | float | str: keep JSON's own type
            if isinstance(value, candidate) and not (candidate is int and isinstance(value, bool)):
                return value
        if isinstance(value, int) and float in inner:
            return float(value)
        raise SnapshotFormatError(f"{path}: unexpected value {value!r}")
    if origin is tuple:
        args = typing.get_args(tp)
        if name in _MAP_FIELDS and isinstance(value, dict):
            value = [[k, v] for k, v in value.items()]
            if name in ("labels", "node_selector"):
                value = sorted(value)
        if not isinstance(value, list | tuple):
            raise SnapshotFormatError(f"{path}: expected a list, got {type(value).__name__}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_decode(args[0], v, f"{path}[{i}]") for i, v in enumerate(value))
        if len(value) != len(args):
            raise SnapshotFormatError(f"{path}: expected {len(args)} items, got {len(value)}")
        return tuple(_decode(a, v, f"{path}[{i}]") for i, (a, v) in enumerate(zip(args, value, strict=True)))
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _decode_dataclass(tp, value, path)
    if isinstance(tp, type) and issubclass(tp, Enum):
        try:
            return tp(value)
        except ValueError:
            allowed = ", ".join(str(m.value) for m in tp)
            raise SnapshotFormatError(f"{path}: {value!r} is not one of {allowed}") from None
    if tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise SnapshotFormatError(f"{path}: expected a number, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise SnapshotFormatError(f"{path}: expected an integer, got {value!r}")
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise SnapshotFormatError(f"{path}: expected true or false, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise SnapshotFormatError(f"{path}: expected a string, got {value!r}")
    return value


def _decode_dataclass(cls: type[T], value: Any, path: str) -> T:
    if not isinstance(value, dict):
        raise SnapshotFormatError(f"{path}: expected an object, got {type(value).__name__}")
    hints = _hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(value) - names)
    if unknown:
        raise SnapshotFormatError(f"{path}: unknown field(s) {', '.join(unknown)}")
    kwargs = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in value:
            kwargs[f.name] = _decode(hints[f.name], value[f.name], f"{path}.{f.name}", f.name)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise SnapshotFormatError(f"{path}: missing field {f.name}")
    return cls(**kwargs)


def snapshot_from_json(data: dict[str, Any]) -> Snapshot:
    """Parse a snapshot dict; raises :class:`SnapshotFormatError` naming the bad path.

    A file for ``schedule_snapshot`` may also carry ``policy`` and ``now``; use
    :func:`cycle_input_from_json` for that. This function ignores neither: it rejects them.
    """
    return _decode_dataclass(Snapshot, data, "snapshot")


def policy_from_json(data: dict[str, Any]) -> Policy:
    return _decode_dataclass(Policy, data, "policy")


def cycle_input_from_json(data: dict[str, Any]) -> tuple[Snapshot, Policy | None, float | None]:
    """Split a snapshot file into (snapshot, optional policy, optional now)."""
    if not isinstance(data, dict):
        raise SnapshotFormatError("snapshot: expected an object")
    rest = dict(data)
    policy_data = rest.pop("policy", None)
    now = rest.pop("now", None)
    policy = None if policy_data is None else policy_from_json(policy_data)
    if now is not None and (not isinstance(now, int | float) or isinstance(now, bool)):
        raise SnapshotFormatError("now: expected a number (POSIX seconds)")
    return snapshot_from_json(rest), policy, None if now is None else float(now)
