"""What the portal writes to the cluster: pods, bindings, events. Pure: no ``kubernetes``, no Django.

``pod_manifest`` builds the pod of one replica in named steps:

1. ``_device_fields``: how the engine's devices are requested (whole GPUs as ``nvidia.com/gpu``, a
   MIG slice as ``nvidia.com/mig-<profile>``, a fractional share as nothing), annotated and exposed
   in the environment;
2. ``container_fields``: the job's image and command, requests equal to limits, a restricted security
   context; the environment: the portal's variables, the devices', ``CHECKPOINT_PATH`` and, for a
   training job, PyTorch's rendezvous variables (``training``);
3. ``_pod_spec``: the portal as ``schedulerName``, ``restartPolicy: Never``, no service account token,
   the restricted pod security context, the job's tolerations, node selector, affinity and topology
   spread constraints (``affinity.pod_fields``: what the engine applied, so the kubelet's admission
   checks the same node affinity); a training worker's ``hostname`` and ``subdomain`` (its stable name);
4. the metadata: the derived name, the team's namespace, ``pod_labels`` and the annotations.

Every pod meets the "restricted" Pod Security Standard (``pod_security.pod_spec_violations`` checks
it). ``binding_manifest`` binds a pod to the engine's node; ``event_manifest`` tells people reading
``kubectl describe`` that it did.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from scheduling.adapters.k8s.affinity import ANN_REQUIRED_TOPOLOGY, pod_fields
from scheduling.adapters.k8s.pods import (
    ANN_DEVICES,
    ANN_GPU_MILLI,
    ANN_MIG_PROFILE,
    ANN_MIG_SLOT,
    ANN_NODE,
    LABEL_ATTEMPT,
    LABEL_JOB,
    LABEL_QUEUE,
    LABEL_REPLICA,
    LABEL_TEAM,
    MANAGED_BY,
    pod_name,
    user_labels,
)
from scheduling.adapters.k8s.resources import GPU_RESOURCE, MIG_RESOURCE_PREFIX
from scheduling.adapters.k8s.training import pod_dns_fields, rendezvous_env
from scheduling.engine.model import PlacementRules, ReplicaPlacement

TRAINING = "training"


@dataclass(frozen=True, slots=True)
class PodJob:
    """What a pod needs from its job (built from the Job row by the backend)."""

    job_id: int
    attempt: int
    namespace: str
    team: str
    queue: str
    image: str
    command: tuple[str, ...]
    replicas: int
    cpu_milli: int
    memory_mib: int
    tolerations: tuple[Mapping, ...] = ()
    node_selector: tuple[tuple[str, str], ...] = ()
    labels: tuple[tuple[str, str], ...] = ()  # the job's own (project, cost center), for cluster-side tools
    rules: PlacementRules | None = None  # affinity, anti-affinity, spread, one-domain level
    kind: str = "batch"  # a training job's pods get the rendezvous variables and stable names
    procs_per_node: int = 1  # training: processes per worker (``training.procs_per_node``)
    checkpoint_path: str = ""  # CHECKPOINT_PATH in every pod when set


def pod_manifest(
    job: PodJob, replica: int, placement: ReplicaPlacement, *, scheduler_name: str, run_as_user: int
) -> dict:
    """The pod of one replica. Always meets the "restricted" Pod Security Standard.

    GPUs: whole devices are requested as ``nvidia.com/gpu`` and a MIG slice as
    ``nvidia.com/mig-<profile>`` so the device plugin enforces them; a fractional share requests no
    device (``nvidia.com/gpu: 0``: several pods share one) and is pinned with ``NVIDIA_VISIBLE_DEVICES``.
    The devices the engine chose are in annotations and ``PORTAL_GPU_*`` variables either way.
    """
    devices = ",".join(str(d) for d in placement.gpu_indices)
    # 1. the devices
    fields = _device_fields(placement, devices)
    # 2. the container
    # nvidia.com/gpu is always set ("0" without whole devices): the team namespace's LimitRange gives
    # containers that leave it out a default GPU, which would turn a CPU, MIG or shared pod into one
    # that takes a whole device (k8s/namespaces.py).
    limits = {"cpu": f"{job.cpu_milli}m", "memory": f"{job.memory_mib}Mi", GPU_RESOURCE: "0", **fields.resources}
    env = [*_portal_env(job, replica, devices), *fields.env, *_workload_env(job, replica)]
    container = container_fields(job, env, limits)
    # 3. the pod spec
    spec = _pod_spec(job, container, scheduler_name=scheduler_name, run_as_user=run_as_user)
    if job.kind == TRAINING:
        spec.update(pod_dns_fields(job.job_id, replica))
    # 4. the metadata
    annotations = {ANN_NODE: placement.node, ANN_DEVICES: devices, **fields.annotations}
    if job.rules is not None and job.rules.required_topology:
        annotations[ANN_REQUIRED_TOPOLOGY] = job.rules.required_topology
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(job.job_id, job.attempt, replica),
            "namespace": job.namespace,
            "labels": pod_labels(job, replica),
            "annotations": annotations,
        },
        "spec": spec,
    }


@dataclass(frozen=True, slots=True)
class _DeviceFields:
    """A placement's devices as the pod carries them (added to the fields every pod has)."""

    resources: dict[str, str] = field(default_factory=dict)  # requested and limited alike
    annotations: dict[str, str] = field(default_factory=dict)
    env: list[dict[str, str]] = field(default_factory=list)


def _device_fields(placement: ReplicaPlacement, devices: str) -> _DeviceFields:
    """Step 1: a MIG slice, whole GPUs, a fractional share of one GPU, or no GPU."""
    if placement.mig_profile:
        slot = str(placement.mig_slot or 0)
        return _DeviceFields(
            resources={MIG_RESOURCE_PREFIX + placement.mig_profile: "1"},
            annotations={ANN_MIG_PROFILE: placement.mig_profile, ANN_MIG_SLOT: slot},
            env=[
                {"name": "PORTAL_MIG_PROFILE", "value": placement.mig_profile},
                {"name": "PORTAL_MIG_SLOT", "value": slot},
            ],
        )
    if placement.gpu_indices and placement.gpu_milli >= 1000:
        return _DeviceFields(
            resources={GPU_RESOURCE: str(len(placement.gpu_indices))}, annotations={ANN_GPU_MILLI: "1000"}
        )
    if placement.gpu_indices:
        return _DeviceFields(
            annotations={ANN_GPU_MILLI: str(placement.gpu_milli)},
            env=[
                {"name": "PORTAL_GPU_MILLI", "value": str(placement.gpu_milli)},
                {"name": "NVIDIA_VISIBLE_DEVICES", "value": devices},
            ],
        )
    return _DeviceFields(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}])


def _portal_env(job: PodJob, replica: int, devices: str) -> list[dict[str, str]]:
    return [
        {"name": "PORTAL_JOB_ID", "value": str(job.job_id)},
        {"name": "PORTAL_ATTEMPT", "value": str(job.attempt)},
        {"name": "PORTAL_REPLICA", "value": str(replica)},
        {"name": "PORTAL_REPLICAS", "value": str(job.replicas)},
        {"name": "PORTAL_GPU_DEVICES", "value": devices},
    ]


def _workload_env(job: PodJob, replica: int) -> list[dict[str, str]]:
    """The checkpoint path, and a training worker's rendezvous variables (``training``)."""
    env = [{"name": "CHECKPOINT_PATH", "value": job.checkpoint_path}] if job.checkpoint_path else []
    if job.kind == TRAINING:
        env += rendezvous_env(
            job_id=job.job_id,
            namespace=job.namespace,
            replica=replica,
            replicas=job.replicas,
            procs=job.procs_per_node,
        )
    return env


def container_fields(job: PodJob, env: list[dict[str, str]], limits: dict[str, str]) -> dict:
    """Step 2: the one container; it requests what it is limited to."""
    container: dict = {
        "name": "main",
        "image": job.image,
        "env": env,
        "resources": {"requests": dict(limits), "limits": limits},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    if job.command:
        container["command"] = list(job.command)
    return container


def _pod_spec(job: PodJob, container: dict, *, scheduler_name: str, run_as_user: int) -> dict:
    """Step 3: bound by the portal (never by the default scheduler), run once, as ``run_as_user``."""
    spec: dict = {
        "schedulerName": scheduler_name,
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 30,
        "securityContext": pod_security_context(run_as_user),
        "containers": [container],
        "tolerations": [toleration_fields(t) for t in job.tolerations],
    }
    if job.node_selector:
        spec["nodeSelector"] = dict(job.node_selector)
    spec.update(pod_fields(job.rules, job.job_id))
    return spec


def pod_security_context(run_as_user: int) -> dict:
    """The restricted pod-level security context every pod of the portal's runs with."""
    return {
        "runAsNonRoot": True,
        "runAsUser": run_as_user,
        "runAsGroup": run_as_user,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def toleration_fields(t: Mapping) -> dict:
    out = {"key": str(t.get("key", "")), "operator": str(t.get("operator", "Equal") or "Equal")}
    if out["operator"] == "Equal":
        out["value"] = str(t.get("value", ""))
    if t.get("effect"):
        out["effect"] = str(t["effect"])
    if not out["key"]:
        out.pop("key")
    return out


def pod_labels(job: PodJob, replica: int) -> dict[str, str]:
    """Step 4: the job's own labels, then the portal's (which win)."""
    return {
        **user_labels(job.labels),
        MANAGED_BY[0]: MANAGED_BY[1],
        LABEL_JOB: str(job.job_id),
        LABEL_ATTEMPT: str(job.attempt),
        LABEL_REPLICA: str(replica),
        LABEL_TEAM: job.team,
        LABEL_QUEUE: job.queue,
    }


def binding_manifest(pod: str, namespace: str, node: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod, "namespace": namespace},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


def event_manifest(*, pod: str, namespace: str, uid: str, reason: str, message: str, at: datetime, source: str) -> dict:
    stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{pod}.{int(at.timestamp() * 1e6):x}", "namespace": namespace},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": pod, "namespace": namespace, "uid": uid},
        "reason": reason,
        "message": message,
        "type": "Normal",
        "source": {"component": source},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
