"""Job specs for the CLI: a YAML file (the API's submit body), command-line flags on top of it.

The YAML file holds the same fields as ``POST /api/v1/jobs/`` (see ``gpuportal.types.JobSpec``)::

    name: resnet
    queue: default
    image: nvcr.io/nvidia/pytorch:24.08-py3
    command: torchrun train.py --epochs 10
    replicas: 2
    gpu: 1
    allowed_gpu_models: [A100-80GB, H100-80GB]
    runtime_s: 7200          # or runtime: 2h

A Ray job (``kind: ray``): the job's own gpu, cpu_milli and memory_mib are the head's, and ``ray``
holds ``mode`` (job or cluster), ``entrypoint`` and ``worker_groups`` (``--ray-mode``, ``--entrypoint``,
``--worker-group gpu:4:2`` on the command line).

Flags override the file's fields; the portal checks the result and names any field it refuses.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from gpuportal.errors import ConfigError

DURATION = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m(?!s))?(?:(\d+)s)?")


class SpecError(ConfigError):
    """The spec file or a flag cannot be read (before anything is sent)."""


def parse_duration(text: str) -> int:
    """Seconds from ``3600``, ``90s``, ``45m``, ``2h``, ``1h30m`` or ``1d``."""
    value = str(text).strip().lower()
    if value.isdigit():
        seconds = int(value)
    else:
        match = DURATION.fullmatch(value)
        if not value or match is None or not any(match.groups()):
            raise SpecError(f"not a duration: {text!r} (e.g. 3600, 90s, 45m, 2h, 1h30m, 1d)")
        days, hours, minutes, secs = (int(g or 0) for g in match.groups())
        seconds = ((days * 24 + hours) * 60 + minutes) * 60 + secs
    if seconds <= 0:
        raise SpecError(f"a duration must be positive: {text!r}")
    return seconds


def load_spec_file(path: str) -> dict[str, Any]:
    """The mapping in a YAML (or JSON) file; ``-`` reads standard input."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecError(f"{path} is not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise SpecError(f"{path} must hold a mapping of job fields (queue, image, gpu, ...), not {type(data).__name__}")
    spec = {str(key): value for key, value in data.items()}
    if "runtime" in spec:  # a friendlier spelling of runtime_s, like the flag
        if "runtime_s" in spec:
            raise SpecError(f"{path}: set runtime or runtime_s, not both")
        spec["runtime_s"] = parse_duration(str(spec.pop("runtime")))
    return spec


def key_values(items: Sequence[str] | None, flag: str) -> dict[str, str]:
    """``["a=1", "b=2"]`` → ``{"a": "1", "b": "2"}``."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SpecError(f"{flag} takes KEY=VALUE, got {item!r}")
        out[key] = value
    return out


# Flag destination → spec field, for the flags that copy their value as given.
PLAIN_FLAGS = {
    "name": "name",
    "team": "team",
    "queue": "queue",
    "kind": "kind",
    "image": "image",
    "replicas": "replicas",
    "min_available": "min_available",
    "gpu": "gpu",
    "gpu_milli": "gpu_milli",
    "mig_profile": "mig_profile",
    "gpu_memory_gib": "gpu_memory_gib",
    "cpu_milli": "cpu_milli",
    "memory_mib": "memory_mib",
    "priority_class": "priority_class",
    "restart_policy": "restart_policy",
    "spot": "spot",
    "checkpoint_path": "checkpoint_path",
    "max_restarts": "max_restarts",
}
GROUP_FIELDS = ("name", "replicas", "gpu", "cpu_milli", "memory_mib")


def worker_group(text: str) -> dict[str, Any]:
    """``gpu:4:2[:8000[:65536]]`` → a Ray worker group (name, replicas, GPUs per worker, CPU, memory)."""
    parts = text.split(":")
    if not 3 <= len(parts) <= len(GROUP_FIELDS) or not all(p.isdigit() for p in parts[1:]) or not parts[0]:
        raise SpecError(f"--worker-group takes NAME:REPLICAS:GPU[:CPU_MILLI[:MEMORY_MIB]], got {text!r}")
    return {"name": parts[0], **{key: int(v) for key, v in zip(GROUP_FIELDS[1:], parts[1:], strict=False)}}


def ray_from(spec: Mapping[str, Any], flags: Mapping[str, Any]) -> dict[str, Any] | None:
    """The spec's ``ray`` with the Ray flags on top (None when neither says anything)."""
    ray = dict(spec.get("ray") or {})
    if flags.get("ray_mode") is not None:
        ray["mode"] = flags["ray_mode"]
    if flags.get("entrypoint") is not None:
        ray["entrypoint"] = flags["entrypoint"]
    if flags.get("worker_group"):
        ray["worker_groups"] = [worker_group(g) for g in flags["worker_group"]]
    return ray or None


def spec_from(file: str | None, flags: Mapping[str, Any], command: Sequence[str] | None = None) -> dict[str, Any]:
    """The spec a CLI call describes: the file's fields, then every flag that was given, then the
    command after ``--`` (an argv list, sent as it is)."""
    spec = load_spec_file(file) if file else {}
    for dest, field in PLAIN_FLAGS.items():
        if flags.get(dest) is not None:
            spec[field] = flags[dest]
    if flags.get("command") is not None:
        spec["command"] = flags["command"]
    if command:
        if flags.get("command") is not None:
            raise SpecError("give the command with --command or after --, not both")
        spec["command"] = list(command)
    if flags.get("runtime") is not None:
        spec["runtime_s"] = parse_duration(flags["runtime"])
    if flags.get("gpu_model"):
        spec["allowed_gpu_models"] = list(flags["gpu_model"])
    if (ray := ray_from(spec, flags)) is not None:
        spec["ray"] = ray
    for dest, field in (("label", "labels"), ("node_selector", "node_selector")):
        if flags.get(dest):
            spec[field] = {**(spec.get(field) or {}), **key_values(flags[dest], "--" + dest.replace("_", "-"))}
    return spec
