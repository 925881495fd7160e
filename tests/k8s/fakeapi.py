"""A small Kubernetes API server for tests: the REST endpoints the portal's backend uses, over real HTTP.

State behaves like the API's: every write bumps a global resourceVersion and appends a watch event;
LIST returns the current version; WATCH from a version streams the later events (newline-delimited
JSON, the connection closed after ``timeoutSeconds``) and answers an ERROR event with code 410 when
the version was compacted away. Creating an existing pod is 409 AlreadyExists, binding a bound pod
409 Conflict. Faults are injected per method and path: a status code, or a delay (client timeouts).

A tiny kubelet lives here too: ``auto_run`` starts bound pods at once, and ``run``/``succeed``/
``fail``/``evict`` move pods the way a node would, stamping the container times.
"""

from __future__ import annotations

import bisect
import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

POD_PATH = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods(?:/(?P<name>[^/]+)(?:/(?P<sub>binding|status))?)?$")
EVENT_PATH = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/events$")


def stamp(at: datetime | None = None) -> str:
    return (at or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")


def status_body(code: int, reason: str, message: str) -> dict:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


@dataclass
class Fault:
    method: str
    path: re.Pattern
    status: int = 500
    delay_s: float = 0.0
    times: int = 1
    hits: int = 0


@dataclass
class FakeKubeApi:
    """Start with ``start()``; ``url`` is the host for a ``kubernetes.client.Configuration``."""

    auto_run: bool = False
    nodes: dict[str, dict] = field(default_factory=dict)
    pods: dict[tuple[str, str], dict] = field(default_factory=dict)
    events: list[dict] = field(default_factory=list)
    requests: list[tuple[str, str]] = field(default_factory=list)
    denied: set[tuple[str, str]] = field(default_factory=set)  # (verb, resource) access reviews refuse

    def __post_init__(self) -> None:
        self.rv = 1000
        self.log: list[tuple[int, str, str, dict]] = []  # (rv, kind, type, object), rv ascending
        self.log_rvs: list[int] = []  # the log's versions, for bisecting
        self.oldest_rv = self.rv  # watches from before this get 410 Gone
        self.cond = threading.Condition()
        self.faults: list[Fault] = []
        self.epoch = 0  # bumped by compact() to end the open watches
        self.closing = threading.Event()
        self.created_pods: list[str] = []  # every successful create, in order (a pod created twice shows)
        self._server: ThreadingHTTPServer | None = None

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> FakeKubeApi:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, and chunked watch streams as the real server sends

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                api.handle(self, "GET")

            def do_POST(self) -> None:
                api.handle(self, "POST")

            def do_DELETE(self) -> None:
                api.handle(self, "DELETE")

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address) -> None:
                pass  # clients dropping connections (timeouts, closed watches) are expected here

        self._server = Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.closing.set()
        with self.cond:
            self.cond.notify_all()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def kubeconfig(self) -> str:
        return json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                "users": [{"name": "portal", "user": {"token": "test-token"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "portal"}}],
                "current-context": "fake",
            }
        )

    # -- faults ------------------------------------------------------------------------------------

    def fail(self, method: str, path: str, *, status: int = 500, times: int = 1, delay_s: float = 0.0) -> Fault:
        """The next ``times`` requests matching ``method`` and the ``path`` regex fail (or stall)."""
        fault = Fault(method, re.compile(path), status=status, delay_s=delay_s, times=times)
        with self.cond:
            self.faults.append(fault)
        return fault

    def _fault_for(self, method: str, path: str) -> Fault | None:
        with self.cond:
            for fault in self.faults:
                if fault.method == method and fault.path.search(path) and fault.hits < fault.times:
                    fault.hits += 1
                    return fault
        return None

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

    def remove_pod(self, namespace: str, name: str) -> None:
        with self.cond:
            pod = self.pods.pop((namespace, name))
            self._write("Pod", "DELETED", pod)

    # -- HTTP --------------------------------------------------------------------------------------

    def handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        parsed = urlparse(handler.path)
        query = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
        path = parsed.path
        with self.cond:
            self.requests.append((method, handler.path))
        length = int(handler.headers.get("Content-Length") or 0)
        body: dict[str, Any] = json.loads(handler.rfile.read(length)) if length else {}
        fault = self._fault_for(method, path)
        if fault is not None:
            if fault.delay_s:
                time.sleep(fault.delay_s)
            if fault.status:
                return self.reply(
                    handler, fault.status, status_body(fault.status, "InjectedFault", f"injected {fault.status}")
                )
        try:
            if path == "/api/v1/nodes" and method == "GET":
                return self.list_or_watch(handler, "Node", query, None)
            if path == "/api/v1/pods" and method == "GET":
                return self.list_or_watch(handler, "Pod", query, None)
            if path == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews" and method == "POST":
                attrs = body["spec"]["resourceAttributes"]
                allowed = (attrs.get("verb"), attrs.get("resource")) not in self.denied
                return self.reply(handler, 201, {**body, "status": {"allowed": allowed}})
            match = EVENT_PATH.match(path)
            if match and method == "POST":
                with self.cond:
                    self.events.append(body)
                return self.reply(handler, 201, body)
            match = POD_PATH.match(path)
            if match:
                return self.pod_endpoint(handler, method, match["ns"], match["name"], match["sub"], query, body)
        except Exception as exc:  # a bug in the fake must show, not hang the client
            return self.reply(handler, 500, status_body(500, "InternalError", repr(exc)))
        return self.reply(handler, 404, status_body(404, "NotFound", f"{method} {path}"))

    def reply(self, handler: BaseHTTPRequestHandler, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        handler.send_response(code)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

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
        return self.nodes if kind == "Node" else self.pods

    def list_or_watch(self, handler, kind: str, query: dict, namespace: str | None) -> None:
        selector = query.get("labelSelector", "")
        if query.get("watch", "").lower() in ("true", "1"):
            return self.watch(handler, kind, query, namespace, selector)
        with self.cond:
            items = [
                json.loads(json.dumps(o)) for o in self._store(kind).values() if self._selected(o, namespace, selector)
            ]
            rv = self.rv
        items.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
        if query.get("limit"):
            items = items[: int(query["limit"])]
        return self.reply(
            handler,
            200,
            {"kind": f"{kind}List", "apiVersion": "v1", "metadata": {"resourceVersion": str(rv)}, "items": items},
        )

    def watch(self, handler, kind: str, query: dict, namespace: str | None, selector: str) -> None:
        timeout_s = float(query.get("timeoutSeconds") or 30)
        deadline = time.monotonic() + timeout_s
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()

        def send(event: dict) -> None:
            data = json.dumps(event).encode() + b"\n"
            handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            handler.wfile.flush()

        try:
            raw = query.get("resourceVersion", "")
            with self.cond:
                epoch = self.epoch
                if raw in ("", "0"):
                    initial = [
                        json.loads(json.dumps(o))
                        for o in self._store(kind).values()
                        if self._selected(o, namespace, selector)
                    ]
                    since = self.rv
                else:
                    initial = []
                    since = int(raw)
                    if since < self.oldest_rv:
                        send(
                            {
                                "type": "ERROR",
                                "object": status_body(410, "Expired", f"too old resource version: {since}"),
                            }
                        )
                        return
            for obj in initial:
                send({"type": "ADDED", "object": obj})
            while not self.closing.is_set():
                with self.cond:
                    if self.epoch != epoch:
                        return
                    start = bisect.bisect_right(self.log_rvs, since)
                    batch = [(rv, t, o) for rv, k, t, o in self.log[start:] if k == kind]
                    if not batch and start < len(self.log):
                        since = self.log_rvs[-1]  # only other kinds changed
                    if not batch:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            return
                        self.cond.wait(min(remaining, 0.5))
                        continue
                for rv, kind_type, obj in batch:
                    since = rv
                    if self._selected(obj, namespace, selector):
                        send({"type": kind_type, "object": obj})
                if time.monotonic() >= deadline:
                    return
        except (BrokenPipeError, ConnectionResetError):
            handler.close_connection = True
            return
        finally:
            try:
                handler.wfile.write(b"0\r\n\r\n")
                handler.wfile.flush()
            except OSError:
                handler.close_connection = True

    def pod_endpoint(self, handler, method: str, namespace: str, name: str, sub: str | None, query: dict, body: dict):
        if name is None:
            if method == "GET":
                return self.list_or_watch(handler, "Pod", query, namespace)
            if method == "POST":
                return self.create_pod(handler, namespace, body)
        key = (namespace, name)
        if sub == "binding" and method == "POST":
            with self.cond:
                pod = self.pods.get(key)
                if pod is None:
                    return self.reply(handler, 404, status_body(404, "NotFound", f'pods "{name}" not found'))
                if pod["spec"].get("nodeName"):
                    return self.reply(
                        handler,
                        409,
                        status_body(
                            409, "Conflict", f"pod {name} is already assigned to node {pod['spec']['nodeName']}"
                        ),
                    )
                node = body["target"]["name"]
                pod["spec"]["nodeName"] = node
                pod["status"]["conditions"] = [
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp()}
                ]
                self._write("Pod", "MODIFIED", pod)
            if self.auto_run:
                self.run(namespace, name)
            return self.reply(handler, 201, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201})
        if sub is None and method == "GET":
            with self.cond:
                pod = self.pods.get(key)
                if pod is None:
                    return self.reply(handler, 404, status_body(404, "NotFound", f'pods "{name}" not found'))
                return self.reply(handler, 200, json.loads(json.dumps(pod)))
        if sub is None and method == "DELETE":
            with self.cond:
                pod = self.pods.pop(key, None)
                if pod is None:
                    return self.reply(handler, 404, status_body(404, "NotFound", f'pods "{name}" not found'))
                pod["metadata"]["deletionTimestamp"] = stamp()
                pod["metadata"]["deletionGracePeriodSeconds"] = int(query.get("gracePeriodSeconds") or 30)
                self._write("Pod", "DELETED", pod)
            return self.reply(handler, 200, pod)
        return self.reply(handler, 405, status_body(405, "MethodNotAllowed", method))

    def create_pod(self, handler, namespace: str, body: dict) -> None:
        name = body["metadata"]["name"]
        with self.cond:
            if (namespace, name) in self.pods:
                return self.reply(handler, 409, status_body(409, "AlreadyExists", f'pods "{name}" already exists'))
            pod = json.loads(json.dumps(body))
            pod["metadata"].update(namespace=namespace, uid=str(uuid.uuid4()), creationTimestamp=stamp())
            pod.setdefault("status", {})["phase"] = "Pending"
            self.pods[(namespace, name)] = pod
            self.created_pods.append(f"{namespace}/{name}")
            self._write("Pod", "ADDED", pod)
            return self.reply(handler, 201, pod)
