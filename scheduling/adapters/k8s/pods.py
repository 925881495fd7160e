"""Pods as the portal marks and reads them. Pure: no ``kubernetes``, no Django.

- The portal's marks: every pod it creates carries the ``MANAGED_BY`` label and the ``LABEL_*``
  labels (job, attempt, replica, team, queue), the engine's choice in the ``ANN_*`` annotations (node,
  devices, GPU share, MIG profile and slot), and a name derived by ``pod_name`` from job, attempt and
  replica, so a retried create cannot start a job twice.
- A job's own labels join them only if ``user_labels`` keeps them: valid (``valid_label``, so a
  create cannot get 422) and never one of the portal's keys.
- What any pod says of itself, read by every other translation: its metadata and labels
  (``object_meta``, ``object_labels``), its phase, whether it holds capacity on its node, and the
  portal job attempt it belongs to (``pod_job_attempt``; None for a pod the portal did not create).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

LABEL_PREFIX = "gpu-portal.io/"
MANAGED_BY = ("app.kubernetes.io/managed-by", "gpu-portal")
LABEL_JOB = LABEL_PREFIX + "job-id"
LABEL_ATTEMPT = LABEL_PREFIX + "attempt"
LABEL_REPLICA = LABEL_PREFIX + "replica"
LABEL_TEAM = LABEL_PREFIX + "team"
LABEL_QUEUE = LABEL_PREFIX + "queue"
ANN_DEVICES = LABEL_PREFIX + "gpu-devices"
ANN_GPU_MILLI = LABEL_PREFIX + "gpu-milli"
ANN_MIG_PROFILE = LABEL_PREFIX + "mig-profile"
ANN_MIG_SLOT = LABEL_PREFIX + "mig-slot"
ANN_NODE = LABEL_PREFIX + "node"

_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def valid_label(key: str, value: str) -> bool:
    """Whether ``key: value`` is a syntactically valid Kubernetes label (so a pod create cannot get 422)."""
    prefix, _, name = key.rpartition("/")
    if prefix and not _LABEL_PREFIX.match(prefix):
        return False
    return bool(_LABEL_NAME.match(name)) and (value == "" or bool(_LABEL_NAME.match(value)))


def user_labels(labels: Iterable[tuple[str, str]]) -> dict[str, str]:
    """A job's own labels that may go on its pods: valid, and not in the portal's reserved keys."""
    return {
        key: value
        for key, value in labels
        if isinstance(key, str)
        and isinstance(value, str)
        and valid_label(key, value)
        and not key.startswith(LABEL_PREFIX)
        and key != MANAGED_BY[0]
    }


def pod_name(job_id: int, attempt: int, replica: int) -> str:
    """Deterministic, so a retried create answers 409 AlreadyExists instead of starting a job twice.

    The attempt is part of the name: a requeued job's new pods never collide with its old ones that
    are still terminating.
    """
    return f"job-{job_id}-a{attempt}-r{replica}"


def object_meta(obj: Mapping) -> Mapping:
    return obj.get("metadata") or {}


def object_labels(obj: Mapping) -> Mapping[str, str]:
    return object_meta(obj).get("labels") or {}


def pod_phase(pod: Mapping) -> str:
    return (pod.get("status") or {}).get("phase") or "Pending"


def pod_holds_capacity(pod: Mapping) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName")) and pod_phase(pod) not in ("Succeeded", "Failed")


def is_managed(pod: Mapping) -> bool:
    return object_labels(pod).get(MANAGED_BY[0]) == MANAGED_BY[1] and object_labels(pod).get(LABEL_JOB, "").isdigit()


def pod_job_attempt(pod: Mapping) -> tuple[int, int] | None:
    labels = object_labels(pod)
    if not is_managed(pod) or not labels.get(LABEL_ATTEMPT, "").isdigit():
        return None
    return int(labels[LABEL_JOB]), int(labels[LABEL_ATTEMPT])
