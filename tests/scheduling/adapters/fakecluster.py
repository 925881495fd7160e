"""The state of a fake Kubernetes cluster for tests: nodes, pods, events, and a watch log; a tiny kubelet.

State behaves like the API server's: every write bumps a global resourceVersion and appends a watch
event to a log that ``compact`` can forget (watches from before then get 410 Gone). The kubelet moves
pods the way a node would, stamping the container times: ``run``/``succeed``/``exit``/``evict`` one
pod, or ``kubelet_tick`` every bound pod. ``fakeapi.FakeKubeApi`` serves this state over HTTP.
"""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime


def stamp(at: datetime | None = None) -> str:
    return (at or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class FakeCluster:
    """The cluster's objects. Every change is made under ``cond`` and logged as a watch event (``_write``)."""

    auto_run: bool = False  # the kubelet starts a pod as soon as it is bound
    nodes: dict[str, dict] = field(default_factory=dict)
    pods: dict[tuple[str, str], dict] = field(default_factory=dict)
    events: list[dict] = field(default_factory=list)
    denied: set[tuple[str, str]] = field(default_factory=set)  # (verb, resource) access reviews refuse
    # Other namespaced objects by kind ("Service", "RayJob", ...): {(namespace, name): object}
    objects: dict[str, dict[tuple[str, str], dict]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rv = 1000
        self.log: list[tuple[int, str, str, dict]] = []  # (rv, kind, type, object), rv ascending
        self.log_rvs: list[int] = []  # the log's versions, for bisecting
        self.oldest_rv = self.rv  # watches from before this get 410 Gone
        self.cond = threading.Condition()
        self.epoch = 0  # bumped by compact() to end the open watches
        self.created_pods: list[str] = []  # every successful create, in order (a pod created twice shows)

    def latest_rv(self, kind: str) -> int:
        """The resourceVersion of the last change to ``kind`` still in the log (0 if none)."""
        with self.cond:
            return max((rv for rv, k, _, _ in self.log if k == kind), default=0)

    def compact(self) -> None:
        """Forget the event log and end the open watches: resuming from any version seen so far
        gets 410 Gone (as after etcd compaction), so clients must relist."""
        with self.cond:
            self.log.clear()
            self.log_rvs.clear()
            self.oldest_rv = self.rv + 1
            self.epoch += 1
            self.cond.notify_all()

    # -- state changes (each one a watch event) ----------------------------------------------------

    def _write(self, kind: str, kind_type: str, obj: dict) -> dict:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.log.append((self.rv, kind, kind_type, json.loads(json.dumps(obj))))
        self.log_rvs.append(self.rv)
        self.cond.notify_all()
        return obj

    def add_node(
        self,
        name: str,
        *,
        gpus: int = 8,
        product: str = "NVIDIA-A100-SXM4-80GB",
        memory_mib: int = 81920,
        cpu: str = "64",
        memory: str = "512Gi",
        labels: dict | None = None,
        taints: list | None = None,
        unschedulable: bool = False,
        ready: bool = True,
        mig: dict[str, int] | None = None,
    ) -> dict:
        node_labels = {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": "zone-a"}
        allocatable = {"cpu": cpu, "memory": memory, "pods": "110"}
        if gpus:
            node_labels |= {
                "nvidia.com/gpu.product": product,
                "nvidia.com/gpu.memory": str(memory_mib),
                "nvidia.com/gpu.count": str(gpus),
            }
            allocatable["nvidia.com/gpu"] = "0" if mig else str(gpus)
        for profile, count in (mig or {}).items():
            allocatable[f"nvidia.com/mig-{profile}"] = str(count)
        node_labels |= labels or {}
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "uid": str(uuid.uuid4()), "labels": node_labels},
            "spec": {"taints": taints or [], "unschedulable": unschedulable},
            "status": {
                "capacity": dict(allocatable),
                "allocatable": allocatable,
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            },
        }
        with self.cond:
            self.nodes[name] = node
            return self._write("Node", "ADDED", node)

    def delete_node(self, name: str) -> None:
        with self.cond:
            node = self.nodes.pop(name)
            self._write("Node", "DELETED", node)

    def taint_node(self, name: str, taint: dict) -> None:
        """Add a taint (a termination notice, a cordon's) to a node, as a controller would."""
        with self.cond:
            node = self.nodes[name]
            node["spec"].setdefault("taints", []).append(taint)
            self._write("Node", "MODIFIED", node)

    def add_foreign_pod(
        self, namespace: str, name: str, node: str, *, gpus: int = 0, cpu: str = "1", memory: str = "1Gi"
    ) -> dict:
        limits = {"cpu": cpu, "memory": memory}
        if gpus:
            limits["nvidia.com/gpu"] = str(gpus)
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4()), "labels": {"app": "other"}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}]},
            "status": {"phase": "Running"},
        }
        with self.cond:
            self.pods[(namespace, name)] = pod
            return self._write("Pod", "ADDED", pod)

    def _set_pod(self, namespace: str, name: str, change) -> dict | None:
        with self.cond:
            pod = self.pods.get((namespace, name))
            if pod is None:
                return None  # deleted meanwhile
            change(pod)
            return self._write("Pod", "MODIFIED", pod)

    def run(self, namespace: str, name: str, at: datetime | None = None) -> dict | None:
        when = stamp(at)

        def change(pod: dict) -> None:
            pod["status"].update(
                phase="Running",
                startTime=when,
                containerStatuses=[{"name": "main", "ready": True, "state": {"running": {"startedAt": when}}}],
            )

        return self._set_pod(namespace, name, change)

    def succeed(self, namespace: str, name: str, at: datetime | None = None, *, exit_code: int = 0) -> dict | None:
        when = stamp(at)

        def change(pod: dict) -> None:
            started = (pod["status"].get("containerStatuses") or [{}])[0].get("state", {}).get("running", {})
            terminated = {
                "exitCode": exit_code,
                "reason": "Completed" if exit_code == 0 else "Error",
                "startedAt": started.get("startedAt", when),
                "finishedAt": when,
            }
            pod["status"].update(
                phase="Succeeded" if exit_code == 0 else "Failed",
                containerStatuses=[{"name": "main", "ready": False, "state": {"terminated": terminated}}],
            )

        return self._set_pod(namespace, name, change)

    def exit(self, namespace: str, name: str, code: int = 1, at: datetime | None = None) -> dict | None:
        return self.succeed(namespace, name, at, exit_code=code)

    def evict(self, namespace: str, name: str, at: datetime | None = None) -> dict | None:
        when = stamp(at)

        def change(pod: dict) -> None:
            pod["status"].update(
                phase="Failed",
                reason="Evicted",
                message="The node was low on resource: memory.",
                conditions=[
                    {
                        "type": "DisruptionTarget",
                        "status": "True",
                        "reason": "TerminationByKubelet",
                        "lastTransitionTime": when,
                    }
                ],
            )

        return self._set_pod(namespace, name, change)

    def kubelet_tick(self, *, runtime_s: float, now: datetime | None = None) -> int:
        """What the nodes' kubelets do: start bound pods, finish those that ran ``runtime_s``."""
        now = now or datetime.now(UTC)
        changed = 0
        with self.cond:
            pods = [(key, pod) for key, pod in self.pods.items() if pod["spec"].get("nodeName")]
        for (namespace, name), pod in pods:
            phase = pod["status"].get("phase")
            if phase == "Pending":
                self.run(namespace, name, at=now)
                changed += 1
            elif phase == "Running":
                started = pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
                if (now - datetime.fromisoformat(started.replace("Z", "+00:00"))).total_seconds() >= runtime_s:
                    self.succeed(namespace, name, at=now)
                    changed += 1
        return changed

    def set_status(self, kind: str, namespace: str, name: str, status: dict) -> dict:
        """An operator's status update of a custom object (KubeRay's RayJob or RayCluster)."""
        with self.cond:
            obj = self._store(kind)[(namespace, name)]
            obj["status"] = json.loads(json.dumps(status))
            self._write(kind, "MODIFIED", obj)
            return json.loads(json.dumps(obj))

    def remove_pod(self, namespace: str, name: str) -> None:
        with self.cond:
            pod = self.pods.pop((namespace, name))
            self._write("Pod", "DELETED", pod)

    # -- reading ------------------------------------------------------------------------------------

    @staticmethod
    def _selected(obj: dict, namespace: str | None, selector: str) -> bool:
        meta = obj["metadata"]
        if namespace is not None and meta.get("namespace") != namespace:
            return False
        labels = meta.get("labels") or {}
        for term in filter(None, selector.split(",")):
            if "!=" in term:
                key, value = term.split("!=", 1)
                if labels.get(key) == value:
                    return False
            elif "=" in term:
                key, value = term.replace("==", "=").split("=", 1)
                if labels.get(key) != value:
                    return False
            elif term.startswith("!"):
                if term[1:] in labels:
                    return False
            elif term not in labels:
                return False
        return True

    def _store(self, kind: str) -> dict:
        if kind == "Node":
            return self.nodes
        if kind == "Pod":
            return self.pods
        return self.objects.setdefault(kind, {})
