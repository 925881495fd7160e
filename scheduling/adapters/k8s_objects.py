"""Kubernetes objects as plain dicts, translated to and from engine values. No I/O, no ``kubernetes`` import.

The Kubernetes backend lists and watches raw JSON (dicts) and hands them here:

1. ``gpu_node_from`` turns a Node into a :class:`GpuNode` (device plugin resources, GPU Feature
   Discovery labels, topology labels, taints, cordon and readiness) and ``node_problems`` says what is
   missing for the portal to use it.
2. ``foreign_usage_from`` charges pods the portal did not create (and the portal's own pods that no
   longer belong to an active job attempt, e.g. a preempted victim still terminating) to their nodes.
3. ``pod_manifest`` builds the pod of one replica: restricted Pod Security Standard, the portal as
   ``schedulerName``, labels, the assigned devices in annotations and environment.
4. ``job_observations`` maps the pods of each active job attempt to job state changes with the
   cluster's own timestamps (gang running, all succeeded, a replica failed, evicted or lost).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from portal.jobs.states import JobState
from scheduling.adapters.contract import Observation
from scheduling.engine.model import ForeignUsage, GpuNode, ReplicaPlacement, Taint, labels_of

GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
GFD_PRODUCT = "nvidia.com/gpu.product"
GFD_MEMORY_MIB = "nvidia.com/gpu.memory"
GFD_COUNT = "nvidia.com/gpu.count"
ZONE_LABEL = "topology.kubernetes.io/zone"

# Labels and annotations on every pod the portal creates.
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

# Pod-level failure reasons that mean the cluster took the pod away, not that the program failed.
DISRUPTION_REASONS = frozenset(
    {"Evicted", "NodeLost", "Preempting", "Shutdown", "NodeShutdown", "Terminated", "UnexpectedAdmissionError"}
)

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


def _meta(obj: Mapping) -> Mapping:
    return obj.get("metadata") or {}


def _labels(obj: Mapping) -> Mapping[str, str]:
    return _meta(obj).get("labels") or {}


# -- nodes --------------------------------------------------------------------------------------


def _family_and_memory(name: str) -> tuple[set[str], int]:
    tokens = {t for t in re.split(r"[-_ ]+", name.upper()) if t}
    memory = 0
    for token in tokens:
        match = re.fullmatch(r"(\d+)GB", token)
        if match:
            memory = int(match.group(1))
    return tokens, memory


def gpu_model_name(product: str, memory_gib: int, known_models: Sequence[str]) -> str:
    """The portal's GPU model name for a GFD product label.

    ``NVIDIA-A100-SXM4-80GB`` with 80 GiB matches a known model ``A100-80GB``: the known name's tokens
    other than its memory must all appear in the product, and the memory must agree. An exact match
    wins; with no match the product without its ``NVIDIA-`` prefix is used, so the node is still seen.
    """
    if product in known_models:
        return product
    product_tokens, product_memory = _family_and_memory(product)
    memory = memory_gib or product_memory
    best: tuple[int, str] | None = None
    for known in sorted(known_models):
        tokens, known_memory = _family_and_memory(known)
        family = {t for t in tokens if not re.fullmatch(r"\d+GB", t)}
        if not family or not family <= product_tokens:
            continue
        if known_memory and memory and abs(known_memory - memory) > max(2, memory // 10):
            continue
        score = len(family) * 10 + (1 if known_memory else 0)
        if best is None or score > best[0]:
            best = (score, known)
    if best is not None:
        return best[1]
    return re.sub(r"^NVIDIA[-_ ]", "", product) or product


def node_ready(node: Mapping) -> bool:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


def mig_resources(allocatable: Mapping[str, str]) -> dict[str, int]:
    return {
        key[len(MIG_RESOURCE_PREFIX) :]: int(quantity(value))
        for key, value in allocatable.items()
        if key.startswith(MIG_RESOURCE_PREFIX) and int(quantity(value)) > 0
    }


def gpu_node_from(node: Mapping, *, known_models: Sequence[str] = ()) -> GpuNode:
    """A Node as the engine sees it. A node that is not Ready counts as cordoned."""
    labels = dict(_labels(node))
    status = node.get("status") or {}
    spec = node.get("spec") or {}
    allocatable = status.get("allocatable") or {}
    whole = int(quantity(allocatable.get(GPU_RESOURCE)))
    mig = mig_resources(allocatable)
    memory_mib = int(labels.get(GFD_MEMORY_MIB) or 0) if (labels.get(GFD_MEMORY_MIB) or "").isdigit() else 0
    gpu_memory_gib = memory_mib // 1024
    if mig:
        # With the mixed MIG strategy the device plugin advertises slices, not devices; GFD counts devices.
        label_count = labels.get(GFD_COUNT, "")
        gpu_count = int(label_count) if label_count.isdigit() else max(1, whole)
    else:
        gpu_count = whole
    product = labels.get(GFD_PRODUCT, "")
    gpu_model = gpu_model_name(product, gpu_memory_gib, known_models) if gpu_count and product else None
    if gpu_count and gpu_model is None:
        gpu_model = "unknown-gpu"
    return GpuNode(
        name=_meta(node).get("name", ""),
        gpu_model=gpu_model,
        gpu_count=gpu_count,
        cpu_milli=cpu_milli_of(allocatable.get("cpu")),
        memory_mib=memory_mib_of(allocatable.get("memory")),
        gpu_memory_gib=gpu_memory_gib,
        labels=labels_of(labels),
        taints=tuple(
            Taint(key=t.get("key", ""), value=t.get("value") or "", effect=t.get("effect", "NoSchedule"))
            for t in spec.get("taints") or []
        ),
        unschedulable=bool(spec.get("unschedulable")) or not node_ready(node),
        mig_enabled=bool(mig),
    )


def node_problems(node: Mapping, *, rack_label: str) -> list[str]:
    """What keeps the portal from using a node fully, in words, for ``manage.py cluster_check``."""
    labels = _labels(node)
    status = node.get("status") or {}
    allocatable = status.get("allocatable") or {}
    capacity = status.get("capacity") or {}
    has_device_plugin = GPU_RESOURCE in capacity or any(k.startswith(MIG_RESOURCE_PREFIX) for k in capacity)
    problems = []
    if not node_ready(node):
        problems.append("not Ready")
    if (node.get("spec") or {}).get("unschedulable"):
        problems.append("cordoned")
    if labels.get(GFD_PRODUCT) and not has_device_plugin:
        problems.append(f"GPU node without {GPU_RESOURCE} capacity: is the NVIDIA device plugin running?")
    if has_device_plugin:
        if not labels.get(GFD_PRODUCT):
            problems.append(f"no {GFD_PRODUCT} label: is GPU Feature Discovery running?")
        if not labels.get(GFD_MEMORY_MIB):
            problems.append(f"no {GFD_MEMORY_MIB} label")
        if mig_resources(allocatable) and not labels.get(GFD_COUNT):
            problems.append(f"MIG node without {GFD_COUNT} label")
        whole = int(quantity(capacity.get(GPU_RESOURCE)))
        usable = int(quantity(allocatable.get(GPU_RESOURCE)))
        if usable < whole:
            problems.append(f"{whole - usable} of {whole} GPUs not allocatable (unhealthy?)")
    if not labels.get(ZONE_LABEL):
        problems.append(f"no {ZONE_LABEL} label")
    if rack_label and not labels.get(rack_label):
        problems.append(f"no {rack_label} label")
    return problems


# -- pods: what they hold -----------------------------------------------------------------------


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


def pod_phase(pod: Mapping) -> str:
    return (pod.get("status") or {}).get("phase") or "Pending"


def pod_holds_capacity(pod: Mapping) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName")) and pod_phase(pod) not in ("Succeeded", "Failed")


def is_managed(pod: Mapping) -> bool:
    return _labels(pod).get(MANAGED_BY[0]) == MANAGED_BY[1] and _labels(pod).get(LABEL_JOB, "").isdigit()


def pod_job_attempt(pod: Mapping) -> tuple[int, int] | None:
    labels = _labels(pod)
    if not is_managed(pod) or not labels.get(LABEL_ATTEMPT, "").isdigit():
        return None
    return int(labels[LABEL_JOB]), int(labels[LABEL_ATTEMPT])


def _annotated_devices(pod: Mapping) -> tuple[int, ...]:
    raw = (_meta(pod).get("annotations") or {}).get(ANN_DEVICES, "")
    return tuple(int(x) for x in raw.split(",") if x.strip().isdigit())


def foreign_usage_from(
    pods: Iterable[Mapping],
    nodes: Sequence[GpuNode],
    *,
    active: set[tuple[int, int]],
    held: Mapping[str, Iterable[int]] | None = None,
) -> list[ForeignUsage]:
    """Capacity held by pods outside the portal's active job attempts.

    A portal pod of an inactive attempt (a preempted victim in its grace period) holds exactly the
    devices in its annotation. Any other pod's whole GPUs are charged to the node's highest-numbered
    devices that neither the active placements (``held``: node -> device indices) nor another pod
    account for, since the device plugin does not say which ones it gave; charging a device the
    engine already counts as used would hide one busy GPU. MIG slices of foreign pods are not tracked
    per slice (their CPU and memory are).
    """
    gpu_count = {n.name: n.gpu_count for n in nodes}
    taken: dict[str, set[int]] = defaultdict(set)
    for name, devices in (held or {}).items():
        taken[name].update(devices)
    usage: list[ForeignUsage] = []
    ordered = sorted(pods, key=lambda p: (_meta(p).get("namespace", ""), _meta(p).get("name", "")))
    for pod in ordered:
        key = pod_job_attempt(pod)
        if key is not None and key not in active and pod_holds_capacity(pod):
            taken[pod["spec"]["nodeName"]].update(_annotated_devices(pod))
    for pod in ordered:
        if not pod_holds_capacity(pod):
            continue
        key = pod_job_attempt(pod)
        if key is not None and key in active:
            continue
        node = pod["spec"]["nodeName"]
        if node not in gpu_count:
            continue
        request = pod_request(pod)
        annotations = _meta(pod).get("annotations") or {}
        if key is not None:
            devices = _annotated_devices(pod)
            if annotations.get(ANN_MIG_PROFILE):
                devices = ()  # the slice is not modelled as foreign usage; see the docstring
            milli = int(annotations.get(ANN_GPU_MILLI, "1000") or 1000)
        else:
            highest_first = range(gpu_count[node] - 1, -1, -1)
            picked = [d for d in highest_first if d not in taken[node]][: request.gpus]
            # More GPUs than devices nobody accounts for (the books disagree): keep the count anyway.
            picked += [d for d in highest_first if d not in picked][: request.gpus - len(picked)]
            devices = tuple(picked)
            taken[node].update(devices)
            milli = 1000
        usage.append(
            ForeignUsage(
                node=node,
                gpu_indices=devices,
                gpu_milli=milli,
                cpu_milli=request.cpu_milli,
                memory_mib=request.memory_mib,
            )
        )
    return usage


# -- pods: what the portal creates --------------------------------------------------------------


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


def _toleration(t: Mapping) -> dict:
    out = {"key": str(t.get("key", "")), "operator": str(t.get("operator", "Equal") or "Equal")}
    if out["operator"] == "Equal":
        out["value"] = str(t.get("value", ""))
    if t.get("effect"):
        out["effect"] = str(t["effect"])
    if not out["key"]:
        out.pop("key")
    return out


def pod_manifest(
    job: PodJob, replica: int, placement: ReplicaPlacement, *, scheduler_name: str, run_as_user: int
) -> dict:
    """The pod of one replica. Always meets the "restricted" Pod Security Standard.

    GPUs: whole devices are requested as ``nvidia.com/gpu`` and a MIG slice as
    ``nvidia.com/mig-<profile>`` so the device plugin enforces them; a fractional share requests no
    device (several pods share one) and is pinned with ``NVIDIA_VISIBLE_DEVICES``. The devices the
    engine chose are in annotations and ``PORTAL_GPU_*`` variables either way.
    """
    name = pod_name(job.job_id, job.attempt, replica)
    limits: dict[str, str] = {"cpu": f"{job.cpu_milli}m", "memory": f"{job.memory_mib}Mi"}
    requests = dict(limits)
    devices = ",".join(str(d) for d in placement.gpu_indices)
    env = [
        {"name": "PORTAL_JOB_ID", "value": str(job.job_id)},
        {"name": "PORTAL_ATTEMPT", "value": str(job.attempt)},
        {"name": "PORTAL_REPLICA", "value": str(replica)},
        {"name": "PORTAL_REPLICAS", "value": str(job.replicas)},
        {"name": "PORTAL_GPU_DEVICES", "value": devices},
    ]
    annotations = {ANN_NODE: placement.node, ANN_DEVICES: devices}
    if placement.mig_profile:
        limits[MIG_RESOURCE_PREFIX + placement.mig_profile] = "1"
        requests[MIG_RESOURCE_PREFIX + placement.mig_profile] = "1"
        annotations[ANN_MIG_PROFILE] = placement.mig_profile
        annotations[ANN_MIG_SLOT] = str(placement.mig_slot or 0)
        env += [
            {"name": "PORTAL_MIG_PROFILE", "value": placement.mig_profile},
            {"name": "PORTAL_MIG_SLOT", "value": str(placement.mig_slot or 0)},
        ]
    elif placement.gpu_indices and placement.gpu_milli >= 1000:
        limits[GPU_RESOURCE] = str(len(placement.gpu_indices))
        requests[GPU_RESOURCE] = str(len(placement.gpu_indices))
        annotations[ANN_GPU_MILLI] = "1000"
    elif placement.gpu_indices:
        annotations[ANN_GPU_MILLI] = str(placement.gpu_milli)
        env += [
            {"name": "PORTAL_GPU_MILLI", "value": str(placement.gpu_milli)},
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": devices},
        ]
    else:
        env.append({"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"})
    container_security = {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    container: dict = {
        "name": "main",
        "image": job.image,
        "env": env,
        "resources": {"requests": requests, "limits": limits},
        "securityContext": container_security,
    }
    if job.command:
        container["command"] = list(job.command)
    spec: dict = {
        "schedulerName": scheduler_name,
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 30,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": run_as_user,
            "runAsGroup": run_as_user,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "tolerations": [_toleration(t) for t in job.tolerations],
    }
    if job.node_selector:
        spec["nodeSelector"] = dict(job.node_selector)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": job.namespace,
            "labels": {
                **user_labels(job.labels),
                MANAGED_BY[0]: MANAGED_BY[1],
                LABEL_JOB: str(job.job_id),
                LABEL_ATTEMPT: str(job.attempt),
                LABEL_REPLICA: str(replica),
                LABEL_TEAM: job.team,
                LABEL_QUEUE: job.queue,
            },
            "annotations": annotations,
        },
        "spec": spec,
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


# -- pods → job states --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ActiveJob:
    """An admitted or running job attempt as the observer needs it."""

    job_id: int
    attempt: int
    state: str  # Admitted or Running
    replicas: int  # pods the attempt has (its placements)
    gang_size: int
    requeue: bool  # restart policy: requeue when evicted


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _container_times(pod: Mapping, key: str) -> list[datetime]:
    out = []
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        for state in ("running", "terminated"):
            stamp = parse_time(((status.get("state") or {}).get(state) or {}).get(key))
            if stamp:
                out.append(stamp)
    return out


def pod_started_at(pod: Mapping) -> datetime | None:
    times = _container_times(pod, "startedAt")
    return max(times) if times else parse_time((pod.get("status") or {}).get("startTime"))


def pod_finished_at(pod: Mapping) -> datetime | None:
    times = _container_times(pod, "finishedAt")
    if times:
        return max(times)
    stamps = [
        parse_time(c.get("lastTransitionTime"))
        for c in (pod.get("status") or {}).get("conditions") or []
        if c.get("lastTransitionTime")
    ]
    known = [s for s in stamps if s is not None]
    return max(known) if known else None


def pod_disrupted(pod: Mapping) -> str:
    """Why the cluster (not the program) ended the pod, or "" if it did not."""
    status = pod.get("status") or {}
    if status.get("reason") in DISRUPTION_REASONS:
        return status["reason"]
    for condition in status.get("conditions") or []:
        if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
            return condition.get("reason") or "DisruptionTarget"
    if pod_phase(pod) == "Failed" and not any(
        (s.get("state") or {}).get("terminated") for s in status.get("containerStatuses") or []
    ):
        return status.get("reason") or "rejected by the node"
    return ""


def _exit_text(pod: Mapping) -> str:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated") or {}
        if terminated.get("exitCode"):
            return f"exit code {terminated['exitCode']} ({terminated.get('reason') or 'Error'})"
    return (pod.get("status") or {}).get("reason") or "failed"


def job_observations(
    jobs: Iterable[ActiveJob], pods: Iterable[Mapping], node_names: set[str], *, now: datetime
) -> list[Observation]:
    """What the pods of each active job attempt say happened, with the cluster's timestamps.

    - a replica evicted, rejected by its node, lost with its node, or gone from a running job:
      requeued (Pending) or Failed by the job's restart policy;
    - a replica that exited non-zero: Failed at its finish time;
    - the gang running: Running at the latest start among the pods;
    - every replica succeeded: Succeeded at the latest finish (Running first if never seen running).

    An admitted job without pods is not news: its pods are still being created (reconcile does it).
    """
    by_attempt: dict[tuple[int, int], list[Mapping]] = defaultdict(list)
    for pod in pods:
        key = pod_job_attempt(pod)
        if key is not None:
            by_attempt[key].append(pod)
    observations: list[Observation] = []
    for job in jobs:
        mine = sorted(by_attempt.get((job.job_id, job.attempt), []), key=lambda p: _meta(p).get("name", ""))
        if job.state == JobState.ADMITTED and not mine:
            continue
        phases = [pod_phase(p) for p in mine]
        lost = [
            p
            for p in mine
            if p["spec"].get("nodeName")
            and p["spec"]["nodeName"] not in node_names
            and pod_phase(p) not in ("Succeeded", "Failed")
        ]
        failed = [p for p, phase in zip(mine, phases, strict=True) if phase == "Failed"]
        missing = job.state == JobState.RUNNING and len(mine) < job.replicas
        disrupted = [p for p in failed if pod_disrupted(p)]
        if lost or missing or disrupted:
            if lost:
                why = f"node {lost[0]['spec']['nodeName']} lost"
            elif disrupted:
                why = f"pod {_meta(disrupted[0]).get('name')} {pod_disrupted(disrupted[0])}"
            else:
                why = f"{job.replicas - len(mine)} of {job.replicas} pods gone"
            stamps = [t for t in (pod_finished_at(p) for p in disrupted) if t]
            at = max(stamps) if stamps else now
            target = JobState.PENDING if job.requeue else JobState.FAILED
            verb = "requeued" if job.requeue else "failed"
            observations.append(Observation(job.job_id, job.attempt, target, at, f"{verb}: {why}"))
            continue
        if failed:
            stamps = [t for t in (pod_finished_at(p) for p in failed) if t]
            at = max(stamps) if stamps else now
            why = f"pod {_meta(failed[0]).get('name')} {_exit_text(failed[0])}"
            observations.append(Observation(job.job_id, job.attempt, JobState.FAILED, at, why))
            continue
        up = [p for p, phase in zip(mine, phases, strict=True) if phase in ("Running", "Succeeded")]
        starts = [t for t in (pod_started_at(p) for p in up) if t]
        started = max(starts) if starts else now
        done = len(mine) >= job.replicas and all(phase == "Succeeded" for phase in phases)
        if job.state == JobState.ADMITTED and (len(up) >= job.gang_size or done):
            observations.append(Observation(job.job_id, job.attempt, JobState.RUNNING, started, "pods running"))
        if done:
            stamps = [t for t in (pod_finished_at(p) for p in mine) if t]
            at = max([*stamps, started]) if stamps else now
            observations.append(Observation(job.job_id, job.attempt, JobState.SUCCEEDED, at, "all pods succeeded"))
    return observations
