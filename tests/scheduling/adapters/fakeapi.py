"""A small Kubernetes API server for tests: the REST endpoints the portal's backend uses, over real HTTP.

It serves a :class:`~tests.scheduling.adapters.fakecluster.FakeCluster` (the objects, the watch
log, the kubelet): LIST returns the current resourceVersion; WATCH from a version streams the later
events (newline-delimited JSON, the connection closed after ``timeoutSeconds``) and answers an ERROR
event with code 410 when the version was compacted away. Creating an existing pod is 409
AlreadyExists, binding a bound pod 409 Conflict. Faults are injected per method and path: a status
code, or a delay (client timeouts). As Go's ``net/http`` does, it sets ``TCP_NODELAY`` and keeps
connections alive. It counts the connections it accepted, its answers (method, resource, status)
and its threads' CPU time, for tests and benchmarks.
"""

from __future__ import annotations

import bisect
import json
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from tests.scheduling.adapters.fakecluster import FakeCluster, stamp

POD_PATH = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods(?:/(?P<name>[^/]+)(?:/(?P<sub>binding|status))?)?$")
EVENT_PATH = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/events$")
# Namespaced objects served generically: core Services and KubeRay's custom resources.
OBJECT_PATH = re.compile(
    r"^/(?:api/v1|apis/(?P<group>[^/]+)/(?P<version>[^/]+))/namespaces/(?P<ns>[^/]+)/(?P<plural>[a-z]+)(?:/(?P<name>[^/]+))?$"
)
ALL_OBJECTS_PATH = re.compile(r"^/(?:api/v1|apis/(?P<group>[^/]+)/(?P<version>[^/]+))/(?P<plural>[a-z]+)$")
KINDS = {
    "services": "Service",
    "rayjobs": "RayJob",
    "rayclusters": "RayCluster",
    "resourcequotas": "ResourceQuota",  # the namespace sync's
    "limitranges": "LimitRange",
}


def status_body(code: int, reason: str, message: str) -> dict:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


def resource_of(path: str) -> str:
    """The resource (and subresource) a path names: ``pods``, ``pods/binding``, ``nodes`` ..."""
    parts = urlparse(path).path.strip("/").split("/")
    if "namespaces" in parts[:-1]:
        rest = parts[parts.index("namespaces") + 2 :]
        return "/".join(rest[:1] + rest[2:3]) or "namespaces"
    return parts[-1]


@dataclass
class Fault:
    method: str
    path: re.Pattern
    status: int = 500
    delay_s: float = 0.0
    times: int = 1
    hits: int = 0


@dataclass
class FakeKubeApi(FakeCluster):
    """Start with ``start()``; ``url`` is the host for a ``kubernetes.client.Configuration``."""

    requests: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.faults: list[Fault] = []
        self.closing = threading.Event()
        self.in_flight = 0  # POSTs being answered right now, and the most at once
        self.in_flight_max = 0
        self.cpu_s = 0.0  # CPU time the server's threads spent answering (benchmarks report it)
        self.connections = 0  # TCP connections accepted (a client that pools them opens few)
        self.answered: Counter[tuple[str, str, int]] = Counter()  # (method, resource, status) -> answers
        self._clock = threading.local()
        self._server: ThreadingHTTPServer | None = None

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> FakeKubeApi:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, and chunked watch streams as the real server sends
            # TCP_NODELAY, as Go's net/http sets on every connection: an answer goes out as its headers
            # and then its body, and with Nagle the body of an answer on a kept-alive connection waits
            # for the client's delayed ACK of the headers (~40 ms a call).
            disable_nagle_algorithm = True

            def log_message(self, *args) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                with api.cond:
                    api.connections += 1

            def do_GET(self) -> None:
                api.handle(self, "GET")

            def do_POST(self) -> None:
                api.handle(self, "POST")

            def do_DELETE(self) -> None:
                api.handle(self, "DELETE")

            def do_PUT(self) -> None:
                api.handle(self, "PUT")

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

    # -- HTTP --------------------------------------------------------------------------------------

    def handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        self._clock.since = time.thread_time()
        post = method == "POST"
        if post:
            with self.cond:
                self.in_flight += 1
                self.in_flight_max = max(self.in_flight_max, self.in_flight)
        try:
            return self._handle(handler, method)
        finally:
            with self.cond:
                self.in_flight -= post
            self._charge()

    def _charge(self) -> None:
        """Add this thread's CPU time since the last charge to ``cpu_s`` (a watch charges as it streams)."""
        now = time.thread_time()
        with self.cond:
            self.cpu_s += now - self._clock.since
        self._clock.since = now

    def _handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
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
            match = OBJECT_PATH.match(path)
            if match and match["plural"] in KINDS:
                return self.object_endpoint(
                    handler, method, KINDS[match["plural"]], match["ns"], match["name"], query, body
                )
            match = ALL_OBJECTS_PATH.match(path)
            if match and match["plural"] in KINDS and method == "GET":
                return self.list_or_watch(handler, KINDS[match["plural"]], query, None)
        except Exception as exc:  # a bug in the fake must show, not hang the client
            return self.reply(handler, 500, status_body(500, "InternalError", repr(exc)))
        return self.reply(handler, 404, status_body(404, "NotFound", f"{method} {path}"))

    def reply(self, handler: BaseHTTPRequestHandler, code: int, body: dict) -> None:
        with self.cond:
            self.answered[(handler.command, resource_of(handler.path), code)] += 1
        data = json.dumps(body).encode()
        handler.send_response(code)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

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
        with self.cond:
            self.answered[("WATCH", resource_of(handler.path), 200)] += 1
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
            self._stream(send, kind, namespace, selector, since=since, epoch=epoch, deadline=deadline)
        except (BrokenPipeError, ConnectionResetError):
            handler.close_connection = True
            return
        finally:
            try:
                handler.wfile.write(b"0\r\n\r\n")
                handler.wfile.flush()
            except OSError:
                handler.close_connection = True

    def _stream(
        self,
        send: Callable[[dict], None],
        kind: str,
        namespace: str | None,
        selector: str,
        *,
        since: int,
        epoch: int,
        deadline: float,
    ) -> None:
        """Send the events of ``kind`` after ``since`` as they come, until the deadline, a compaction or shutdown."""
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
            self._charge()
            if time.monotonic() >= deadline:
                return

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

    def object_endpoint(self, handler, method: str, kind: str, namespace: str, name: str | None, query, body):
        """Create (409 if it exists), get, list and delete (404 if absent) any other namespaced kind."""
        store = self._store(kind)
        if name is None and method == "GET":
            return self.list_or_watch(handler, kind, query, namespace)
        if name is None and method == "POST":
            name = body["metadata"]["name"]
            with self.cond:
                if (namespace, name) in store:
                    return self.reply(
                        handler, 409, status_body(409, "AlreadyExists", f'{kind} "{name}" already exists')
                    )
                obj = json.loads(json.dumps(body))
                obj["metadata"].update(namespace=namespace, uid=str(uuid.uuid4()), creationTimestamp=stamp())
                store[(namespace, name)] = obj
                self._write(kind, "ADDED", obj)
                return self.reply(handler, 201, obj)
        with self.cond:
            obj = store.get((namespace, name or ""))
            if obj is None:
                return self.reply(handler, 404, status_body(404, "NotFound", f'{kind} "{name}" not found'))
            if method == "GET":
                return self.reply(handler, 200, json.loads(json.dumps(obj)))
            if method == "DELETE":
                del store[(namespace, name or "")]
                self._write(kind, "DELETED", obj)
                return self.reply(handler, 200, obj)
            if method == "PUT":  # optimistic concurrency: the body's resourceVersion must be the stored one
                if body.get("metadata", {}).get("resourceVersion") != obj["metadata"]["resourceVersion"]:
                    return self.reply(
                        handler, 409, status_body(409, "Conflict", f"the object {name} has been modified")
                    )
                return self.reply(handler, 200, self.put_object(kind, namespace, body))
        return self.reply(handler, 405, status_body(405, "MethodNotAllowed", method))

    def put_object(self, kind: str, namespace: str, body: dict) -> dict:
        """Replace (or create) a namespaced object, as a person with kubectl could too."""
        with self.cond:
            store = self._store(kind)
            old = store.get((namespace, body["metadata"]["name"]))
            obj = json.loads(json.dumps(body))
            uid = old["metadata"]["uid"] if old else str(uuid.uuid4())
            obj["metadata"].update(namespace=namespace, uid=uid)
            obj["metadata"].setdefault("creationTimestamp", stamp())
            store[(namespace, obj["metadata"]["name"])] = obj
            self._write(kind, "MODIFIED" if old else "ADDED", obj)
            return json.loads(json.dumps(obj))

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
