"""A Ray job as KubeRay's objects, and their status as job state changes. Pure: no ``kubernetes``, no Django.

``ray_manifest`` builds the ``ray.io/v1`` object of one admitted attempt, in named steps:

1. the kind: a ``RayJob`` (``mode: job``: KubeRay starts the cluster, submits ``entrypoint`` over the
   dashboard's HTTP API, so no submitter pod holds capacity, and deletes the cluster when the job
   ends) or a ``RayCluster`` (``mode: cluster``: runs until cancelled);
2. one pod template per group: the head (``headGroupSpec``) and each worker group
   (``workerGroupSpecs``, ``replicas`` = ``minReplicas`` = ``maxReplicas``: the gang was admitted whole,
   Ray's autoscaler may not grow it past what the portal admitted), each pod requesting what the engine
   placed (CPU, memory, ``nvidia.com/gpu``), restricted as the portal's own pods are;
3. the portal's scheduling: the pods of a group may run only on the nodes the engine chose for that
   group (required node affinity on ``metadata.name``), with the job's node selector and tolerations;
4. the portal's marks on the object and every pod: managed-by, job, attempt, team, queue, the group
   (``gpu-portal.io/ray-group``), so the pods are the job attempt's (never foreign usage) and a
   stale attempt's pods are orphans.

``ray_observation`` reads the object's status: Running once the cluster is ready (RayJob: job
running), Succeeded / Failed when a RayJob's job ends (at its ``endTime``), Failed when a RayCluster
fails; a running attempt whose object is gone is requeued or failed by the restart policy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from portal.jobs.states import JobState
from scheduling.adapters.contract import Observation
from scheduling.adapters.k8s.manifests import (
    PodJob,
    container_fields,
    pod_labels,
    pod_security_context,
    toleration_fields,
)
from scheduling.adapters.k8s.observations import parse_time
from scheduling.adapters.k8s.pods import LABEL_PREFIX, LABEL_REPLICA
from scheduling.adapters.k8s.ray import WorkerGroup, ray_mode, worker_groups
from scheduling.adapters.k8s.resources import GPU_RESOURCE
from scheduling.engine.model import ReplicaPlacement

RAY_GROUP = "ray.io"
RAY_VERSION = "v1"
LABEL_RAY_GROUP = LABEL_PREFIX + "ray-group"
HEAD = "head"


def ray_plural(ray: Mapping) -> str:
    return "rayjobs" if ray_mode(ray) == "job" else "rayclusters"


def ray_object_name(job_id: int, attempt: int) -> str:
    """Per attempt, so a requeued job's new object never collides with its old one being deleted."""
    return f"job-{job_id}-a{attempt}"


def group_placements(
    ray: Mapping, placements: Sequence[ReplicaPlacement]
) -> list[tuple[str, WorkerGroup | None, list[ReplicaPlacement]]]:
    """The placements of each group in pod order: the head (replica 0), then each worker group's."""
    out: list[tuple[str, WorkerGroup | None, list[ReplicaPlacement]]] = [(HEAD, None, list(placements[:1]))]
    start = 1
    for group in worker_groups(ray):
        out.append((group.name, group, list(placements[start : start + group.replicas])))
        start += group.replicas
    return out


def ray_manifest(
    job: PodJob, ray: Mapping, placements: Sequence[ReplicaPlacement], *, run_as_user: int, entrypoint: str = ""
) -> dict:
    """The ``RayJob`` or ``RayCluster`` of one admitted attempt (see the module docstring)."""
    groups = group_placements(ray, placements)
    head_name, _, head_placements = groups[0]
    cluster: dict = {
        "headGroupSpec": {
            "rayStartParams": {"dashboard-host": "0.0.0.0"},
            "template": _template(job, head_name, head_placements, run_as_user=run_as_user),
        },
        "workerGroupSpecs": [
            {
                "groupName": name,
                "replicas": len(group_placed),
                "minReplicas": len(group_placed),
                "maxReplicas": len(group_placed),
                "rayStartParams": {},
                "template": _template(job, name, group_placed, run_as_user=run_as_user),
            }
            for name, _, group_placed in groups[1:]
        ],
    }
    # 1. the kind
    if ray_mode(ray) == "job":
        kind, spec = (
            "RayJob",
            {
                "entrypoint": entrypoint or str(ray.get("entrypoint", "")),
                "submissionMode": "HTTPMode",
                "shutdownAfterJobFinishes": True,
                "rayClusterSpec": cluster,
            },
        )
    else:
        kind, spec = "RayCluster", cluster
    labels = pod_labels(job, 0)
    labels.pop(LABEL_REPLICA)
    return {
        "apiVersion": f"{RAY_GROUP}/{RAY_VERSION}",
        "kind": kind,
        "metadata": {"name": ray_object_name(job.job_id, job.attempt), "namespace": job.namespace, "labels": labels},
        "spec": spec,
    }


def _template(job: PodJob, group: str, placed: Sequence[ReplicaPlacement], *, run_as_user: int) -> dict:
    """Steps 2-4 for one group: its pods' template."""
    first = placed[0] if placed else ReplicaPlacement(node="")
    gpus = len(first.gpu_indices) if first.gpu_milli >= 1000 or not first.gpu_milli else 0
    limits = {"cpu": f"{first.cpu_milli}m", "memory": f"{first.memory_mib}Mi", GPU_RESOURCE: str(gpus)}
    env = [{"name": "CHECKPOINT_PATH", "value": job.checkpoint_path}] if job.checkpoint_path else []
    env += [
        {"name": "PORTAL_JOB_ID", "value": str(job.job_id)},
        {"name": "PORTAL_ATTEMPT", "value": str(job.attempt)},
        {"name": "PORTAL_RAY_GROUP", "value": group},
    ]
    container = container_fields(job, env, limits)
    container["name"] = "ray-head" if group == HEAD else "ray-worker"
    container.pop("command", None)  # KubeRay starts ray itself; a RayJob's command is its entrypoint
    nodes = sorted({p.node for p in placed})
    spec: dict = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": pod_security_context(run_as_user),
        "containers": [container],
        "tolerations": [toleration_fields(t) for t in job.tolerations],
        # 3. only on the nodes the engine chose for this group
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": nodes}]}
                    ]
                }
            }
        },
    }
    if job.node_selector:
        spec["nodeSelector"] = dict(job.node_selector)
    labels = pod_labels(job, 0)
    labels.pop(LABEL_REPLICA)  # KubeRay makes the pods: their order is its own
    labels[LABEL_RAY_GROUP] = group
    return {"metadata": {"labels": labels}, "spec": spec}


# -- status -------------------------------------------------------------------------------------------


def _ready_at(status: Mapping) -> datetime | None:
    """When a RayCluster's status says it became ready (its Ready condition, else its last update)."""
    for condition in status.get("conditions") or ():
        if condition.get("type") in ("Ready", "RayClusterReady") and condition.get("status") == "True":
            return parse_time(condition.get("lastTransitionTime"))
    if str(status.get("state", "")).lower() == "ready":
        return parse_time(status.get("lastUpdateTime"))
    return None


def ray_observation(
    *, job_id: int, attempt: int, state: str, obj: Mapping | None, requeue: bool, now: datetime
) -> Observation | None:
    """What one active attempt's KubeRay object says happened (None: nothing new)."""
    name = ray_object_name(job_id, attempt)
    if obj is None:
        if state != JobState.RUNNING:
            return None  # admitted: reconcile creates it
        verb = "requeued" if requeue else "failed"
        target = JobState.PENDING if requeue else JobState.FAILED
        return Observation(job_id, attempt, target, now, f"{verb}: Ray object {name} gone")
    status = obj.get("status") or {}
    if obj.get("kind") == "RayJob":
        return _rayjob_observation(job_id, attempt, state, name, status, now)
    if str(status.get("state", "")).lower() == "failed":
        at = parse_time(status.get("lastUpdateTime")) or now
        return Observation(
            job_id, attempt, JobState.FAILED, at, f"RayCluster {name} failed: {status.get('reason', '')}"
        )
    if state == JobState.ADMITTED and (ready := _ready_at(status)) is not None:
        return Observation(job_id, attempt, JobState.RUNNING, ready, "Ray cluster ready")
    return None


def _rayjob_observation(
    job_id: int, attempt: int, state: str, name: str, status: Mapping, now: datetime
) -> Observation | None:
    job_status = str(status.get("jobStatus", "")).upper()
    deployment = str(status.get("jobDeploymentStatus", ""))
    ended = parse_time(status.get("endTime")) or now
    if job_status == "SUCCEEDED":
        return Observation(job_id, attempt, JobState.SUCCEEDED, ended, f"RayJob {name} succeeded")
    if job_status in ("FAILED", "STOPPED") or deployment == "Failed":
        why = status.get("message") or status.get("reason") or job_status.lower() or "failed"
        return Observation(job_id, attempt, JobState.FAILED, ended, f"RayJob {name}: {why}", worker_failed=True)
    if state == JobState.ADMITTED and (job_status == "RUNNING" or deployment == "Running"):
        cluster = status.get("rayClusterStatus") or {}
        started = _ready_at(cluster) or parse_time(status.get("startTime")) or now
        return Observation(job_id, attempt, JobState.RUNNING, started, "Ray job running")
    return None
