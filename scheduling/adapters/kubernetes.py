"""The Kubernetes cluster backend: the only module that imports ``kubernetes``.

Reading the cluster (informers):

1. Each process keeps two caches, nodes and pods, each filled by LIST and kept current by WATCH from
   the list's resourceVersion in a daemon thread. A watch ends after ``K8S_WATCH_TIMEOUT_S`` (server
   side) and resumes from the last resourceVersion seen; 410 Gone means the version is too old, so the
   cache is relisted; any other failure is retried with exponential backoff.
2. Every call carries a client-side timeout (connect and read), watches included, so a silent
   network partition raises instead of hanging a worker.
3. The caches are eventually consistent, as every Kubernetes controller's are; everything written
   from them is idempotent or re-checked against the database (see ``reconcile``). Before a cycle
   reads them, ``sync`` relists a cache whose watch has been out of contact for longer than one watch
   plus its timeouts (a dead thread, an API outage), and an API that stays down fails the cycle.

Writing the cluster (``start``, ``stop``, ``reconcile``):

- an admitted job becomes one pod per replica in its team's namespace, named from the job id,
  attempt and replica (a retried create that gets 409 AlreadyExists is success), with the portal as
  ``schedulerName``, then is bound to the chosen node through the Binding API (409: already bound);
- stopping deletes the attempt's pods with a grace period (404: already gone);
- ``reconcile`` converges after any crash: pods missing for an admitted job are created and its
  unbound ones bound; pods of unknown jobs, and live pods of finished jobs or older attempts, are
  deleted.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import urllib3
from django.conf import settings
from django.utils import timezone
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from portal.jobs.models import GpuModel, Job, ReplicaPlacement
from portal.jobs.states import ACTIVE_STATES, JobState
from scheduling.adapters import k8s_objects as ko
from scheduling.adapters.contract import Observation
from scheduling.engine.model import ForeignUsage, GpuNode

logger = logging.getLogger(__name__)

T = TypeVar("T")
RETRYABLE_STATUS = frozenset({0, 408, 429, 500, 502, 503, 504})
NETWORK_ERRORS = (urllib3.exceptions.HTTPError, OSError, TimeoutError)


class ClusterApiError(Exception):
    """A Kubernetes API call kept failing in a retryable way (5xx, 429, timeout, connection)."""


@dataclass(frozen=True, slots=True)
class K8sOptions:
    scheduler_name: str = "gpu-portal"
    rack_label: str = "topology.kubernetes.io/rack"
    timeout_s: float = 10.0  # connect and read timeout of every call
    watch_timeout_s: int = 60  # server-side length of one watch
    sync_timeout_s: float = 10.0  # how long a cycle waits for the caches to catch up
    grace_s: int = 30
    run_as_user: int = 1000
    retries: int = 3  # attempts per call on retryable failures
    backoff_s: float = 0.2  # first retry delay; doubles, capped at 5 s

    @classmethod
    def from_settings(cls) -> K8sOptions:
        return cls(
            scheduler_name=settings.K8S_SCHEDULER_NAME,
            rack_label=settings.K8S_RACK_LABEL,
            timeout_s=settings.K8S_TIMEOUT_S,
            watch_timeout_s=settings.K8S_WATCH_TIMEOUT_S,
            sync_timeout_s=settings.K8S_SYNC_TIMEOUT_S,
            grace_s=settings.K8S_POD_GRACE_S,
            run_as_user=settings.K8S_RUN_AS_USER,
            retries=settings.K8S_API_RETRIES,
            backoff_s=settings.K8S_API_BACKOFF_S,
        )


def api_client_from_settings() -> client.ApiClient:
    """An API client from ``KUBECONFIG`` (first file of the list) or, without it, the in-cluster config."""
    configuration = client.Configuration()
    kubeconfig = settings.KUBECONFIG.split(os.pathsep)[0] if settings.KUBECONFIG else ""
    try:
        if kubeconfig:
            config.load_kube_config(
                config_file=kubeconfig, context=settings.K8S_CONTEXT or None, client_configuration=configuration
            )
        else:
            config.load_incluster_config(client_configuration=configuration)
    except ConfigException as exc:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(
            f"CLUSTER_BACKEND=kubernetes but no cluster configuration: {exc} "
            "(set KUBECONFIG, or run in a pod with a service account)"
        ) from exc
    # Retries are ours (with backoff and a bound); urllib3's own would multiply the timeouts.
    configuration.retries = False
    return client.ApiClient(configuration)


def call(fn: Callable[[], T], *, retries: int, backoff_s: float, what: str) -> T:
    """Run one API call, retrying retryable failures with exponential backoff; others propagate.

    ``retries`` counts attempts; anything below 1 still makes one (``K8S_API_RETRIES=0``: no retry).
    """
    retries = max(1, retries)
    for attempt in range(retries):
        try:
            return fn()
        except ApiException as exc:
            if exc.status not in RETRYABLE_STATUS:
                raise
            error: Exception = exc
        except NETWORK_ERRORS as exc:
            error = exc
        if attempt + 1 < retries:
            time.sleep(min(5.0, backoff_s * 2**attempt))
    logger.warning("kubernetes: %s failed after %d attempts: %s", what, retries, error)
    raise ClusterApiError(f"{what}: {error}") from error


def _key(obj: Mapping) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


class Informer:
    """A cache of one resource kind: LIST, then WATCH from the resourceVersion, relist on 410 Gone."""

    def __init__(self, name: str, list_fn: Callable[..., Any], options: K8sOptions, **selectors: str) -> None:
        self.name = name
        self.list_fn = list_fn
        self.options = options
        self.selectors = {k: v for k, v in selectors.items() if v}
        self._items: dict[str, dict] = {}
        self._rv: str | None = None
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.relists = 0
        self.watch_errors = 0
        self.last_contact = 0.0  # monotonic time of the last successful list, watch event or watch end
        self._generation = 0  # bumped by every relist; a watch started before it stops applying events

    @property
    def resource_version(self) -> str | None:
        return self._rv

    def items(self) -> list[dict]:
        with self._cond:
            return list(self._items.values())

    def relist(self) -> None:
        """LIST everything now and replace the cache (the first fill, and recovery from 410 Gone)."""
        timeout = (self.options.timeout_s, self.options.timeout_s)
        response = call(
            lambda: self.list_fn(_preload_content=False, _request_timeout=timeout, **self.selectors),
            retries=self.options.retries,
            backoff_s=self.options.backoff_s,
            what=f"list {self.name}",
        )
        body = json.loads(response.data)
        with self._cond:
            self._items = {_key(item): item for item in body.get("items") or []}
            self._rv = (body.get("metadata") or {}).get("resourceVersion")
            self._generation += 1
            self.relists += 1
            self.last_contact = time.monotonic()
            self._cond.notify_all()

    def _watch(self) -> None:
        # return_type "object" keeps events as plain dicts (no model deserialization).
        watcher = watch.Watch(return_type="object")
        timeout = (self.options.timeout_s, self.options.watch_timeout_s + self.options.timeout_s)
        generation = self._generation
        for event in watcher.stream(
            self.list_fn,
            resource_version=self._rv,
            timeout_seconds=self.options.watch_timeout_s,
            allow_watch_bookmarks=True,
            _request_timeout=timeout,
            **self.selectors,
        ):
            if not isinstance(event, dict):
                continue
            obj = event["raw_object"]
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            with self._cond:
                if self._generation != generation:
                    # Relisted meanwhile (a cycle found the cache stale): this stream is older than
                    # the cache now; resume from the list's version instead.
                    watcher.stop()
                    break
                if event["type"] in ("ADDED", "MODIFIED"):
                    self._items[_key(obj)] = obj
                elif event["type"] == "DELETED":
                    self._items.pop(_key(obj), None)
                if rv:
                    self._rv = rv
                self.last_contact = time.monotonic()
                self._cond.notify_all()
            if self._stop.is_set():
                watcher.stop()
                break

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                if self._rv is None:
                    self.relist()
                self._watch()
                self.last_contact = time.monotonic()
                failures = 0
                continue
            except ApiException as exc:
                if exc.status == 410:
                    logger.info("kubernetes: %s watch expired (410 Gone); relisting", self.name)
                    with self._cond:
                        self._rv = None
                    continue
                logger.warning("kubernetes: %s watch failed: %s", self.name, exc.status)
            except (ClusterApiError, ValueError, *NETWORK_ERRORS) as exc:
                logger.warning("kubernetes: %s watch failed: %s", self.name, exc)
            failures += 1
            self.watch_errors += 1
            self._stop.wait(min(5.0, self.options.backoff_s * 2 ** min(failures, 6)))

    def start(self) -> None:
        """Fill the cache (synchronously, so errors surface) and start watching in the background."""
        if self._thread is not None and self._thread.is_alive():
            return
        if self._rv is None:
            self.relist()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=f"k8s-informer-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def ensure_fresh(self, max_age_s: float) -> bool:
        """Relist synchronously when the watch has not been in contact for ``max_age_s`` (its thread
        died or keeps failing), so a cycle never plans from a view that silently stopped updating.
        Returns whether a relist was needed; raises :class:`ClusterApiError` if the API is down."""
        if time.monotonic() - self.last_contact <= max_age_s and self._thread is not None and self._thread.is_alive():
            return False
        logger.warning("kubernetes: %s cache is stale; relisting", self.name)
        self.relist()
        if self._thread is None or not self._thread.is_alive():
            self.start()
        return True


@dataclass(frozen=True, slots=True)
class StartResult:
    created: int = 0
    existed: int = 0
    bound: int = 0


class KubernetesBackend:
    """A :class:`~scheduling.adapters.contract.ClusterBackend` over the Kubernetes API."""

    name = "kubernetes"

    def __init__(self, *, api_client: client.ApiClient, options: K8sOptions | None = None) -> None:
        self.options = options or K8sOptions()
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.node_informer = Informer("nodes", self.core.list_node, self.options)
        self.pod_informer = Informer("pods", self.core.list_pod_for_all_namespaces, self.options)
        self._started = False
        self._lock = threading.Lock()

    # -- construction -----------------------------------------------------------------------------

    _instances: dict[int, KubernetesBackend] = {}

    @classmethod
    def from_settings(cls) -> KubernetesBackend:
        """One backend (and one pair of informers) per process; a forked worker child makes its own."""
        pid = os.getpid()
        backend = cls._instances.get(pid)
        if backend is None:
            backend = cls(api_client=api_client_from_settings(), options=K8sOptions.from_settings())
            cls._instances = {pid: backend}
        return backend

    def close(self) -> None:
        self.node_informer.stop()
        self.pod_informer.stop()

    def _call(self, fn: Callable[[], T], what: str) -> T:
        return call(fn, retries=self.options.retries, backoff_s=self.options.backoff_s, what=what)

    @property
    def _timeout(self) -> tuple[float, float]:
        return (self.options.timeout_s, self.options.timeout_s)

    # -- reading ----------------------------------------------------------------------------------

    def _ensure_started(self) -> None:
        with self._lock:
            if not self._started:
                self.node_informer.start()
                self.pod_informer.start()
                self._started = True

    def sync(self) -> None:
        """Make sure both caches are filled and alive (see the module docstring, step 3)."""
        self._ensure_started()
        max_age_s = self.options.watch_timeout_s + 2 * self.options.timeout_s + self.options.sync_timeout_s
        self.node_informer.ensure_fresh(max_age_s)
        self.pod_informer.ensure_fresh(max_age_s)

    def raw_nodes(self) -> list[dict]:
        self._ensure_started()
        return sorted(self.node_informer.items(), key=lambda n: n["metadata"]["name"])

    def raw_pods(self) -> list[dict]:
        self._ensure_started()
        return self.pod_informer.items()

    def nodes(self) -> list[GpuNode]:
        known = list(GpuModel.objects.values_list("name", flat=True))
        return [ko.gpu_node_from(node, known_models=known) for node in self.raw_nodes()]

    def foreign_usage(self) -> list[ForeignUsage]:
        active = set(Job.objects.filter(state__in=ACTIVE_STATES).values_list("id", "attempt"))
        held: dict[str, set[int]] = {}
        for node, indices in ReplicaPlacement.objects.filter(job__state__in=ACTIVE_STATES).values_list(
            "node", "gpu_indices"
        ):
            held.setdefault(node, set()).update(indices)
        return ko.foreign_usage_from(self.raw_pods(), self.nodes(), active=active, held=held)

    def _active_jobs(self) -> list[ko.ActiveJob]:
        counts: dict[int, int] = {}
        for job_id in ReplicaPlacement.objects.filter(job__state__in=ACTIVE_STATES).values_list("job_id", flat=True):
            counts[job_id] = counts.get(job_id, 0) + 1
        rows = Job.objects.filter(state__in=ACTIVE_STATES).values_list(
            "id", "attempt", "state", "replicas", "min_available", "restart_policy"
        )
        return [
            ko.ActiveJob(
                job_id=job_id,
                attempt=attempt,
                state=state,
                replicas=counts.get(job_id, replicas),
                gang_size=min(min_available or replicas, counts.get(job_id, replicas)),
                requeue=policy == Job.RestartPolicy.REQUEUE,
            )
            for job_id, attempt, state, replicas, min_available, policy in rows
        ]

    def observe(self, *, now: datetime) -> list[Observation]:
        self.sync()
        # Pods first, then the database: a pod in the cache was created after its job's admission
        # committed, so the job rows read next are at least that new.
        pods = self.raw_pods()
        node_names = {n["metadata"]["name"] for n in self.raw_nodes()}
        return ko.job_observations(self._active_jobs(), pods, node_names, now=now)

    # -- writing ----------------------------------------------------------------------------------

    def _pod_job(self, job: Job, replicas: int) -> ko.PodJob:
        return ko.PodJob(
            job_id=job.pk,
            attempt=job.attempt,
            namespace=job.team.namespace,
            team=job.team.slug,
            queue=job.local_queue.name,
            image=job.image,
            command=tuple(str(a) for a in job.command or ()),
            replicas=replicas,
            cpu_milli=job.cpu_milli,
            memory_mib=job.memory_mib,
            tolerations=tuple(job.tolerations or ()),
            node_selector=tuple(sorted((job.node_selector or {}).items())),
            labels=tuple(sorted((getattr(job, "labels", None) or {}).items())),
        )

    def pods_for(self, job: Job) -> list[dict]:
        """The manifests of a job's current attempt, from its placements.

        ``PORTAL_REPLICAS`` is the number of placements: a gang with ``min_available`` may have been
        admitted with fewer replicas than it asked for, and its pods must not wait for the others.
        """
        placements = list(job.placements.order_by("replica"))
        pod_job = self._pod_job(job, len(placements))
        return [
            ko.pod_manifest(
                pod_job,
                p.replica,
                p.engine_placement(),
                scheduler_name=self.options.scheduler_name,
                run_as_user=self.options.run_as_user,
            )
            for p in placements
        ]

    def create_and_bind(self, manifest: dict, *, skip_create: bool = False) -> StartResult:
        """Create one pod (409 AlreadyExists is success) and bind it to its node (409: already bound)."""
        namespace = manifest["metadata"]["namespace"]
        name = manifest["metadata"]["name"]
        node = manifest["metadata"]["annotations"][ko.ANN_NODE]
        created = existed = 0
        uid = ""
        if not skip_create:
            try:
                response = self._call(
                    lambda: self.core.create_namespaced_pod(
                        namespace, manifest, _preload_content=False, _request_timeout=self._timeout
                    ),
                    f"create pod {namespace}/{name}",
                )
                uid = (json.loads(response.data).get("metadata") or {}).get("uid", "")
                created = 1
            except ApiException as exc:
                if exc.status != 409:
                    raise
                existed = 1
        bound = 0
        try:
            self._call(
                lambda: self.core.create_namespaced_pod_binding(
                    name,
                    namespace,
                    ko.binding_manifest(name, namespace, node),
                    _preload_content=False,
                    _request_timeout=self._timeout,
                ),
                f"bind pod {namespace}/{name} to {node}",
            )
            bound = 1
        except ApiException as exc:
            if exc.status != 409:
                raise
        if bound:
            self._event(namespace, name, uid, "Scheduled", f"Successfully assigned {namespace}/{name} to {node}")
        return StartResult(created=created, existed=existed, bound=bound)

    def _event(self, namespace: str, pod: str, uid: str, reason: str, message: str) -> None:
        """Best effort: an event is for people reading ``kubectl describe``; losing one loses nothing."""
        body = ko.event_manifest(
            pod=pod,
            namespace=namespace,
            uid=uid,
            reason=reason,
            message=message,
            at=timezone.now(),
            source=self.options.scheduler_name,
        )
        try:
            self.core.create_namespaced_event(namespace, body, _preload_content=False, _request_timeout=self._timeout)
        except (ApiException, *NETWORK_ERRORS) as exc:
            logger.info("kubernetes: event %s for %s/%s not recorded: %s", reason, namespace, pod, exc)

    def start(self, *, job_id: int) -> None:
        """Create and bind the pods of an admitted job's current attempt (idempotent)."""
        job = Job.objects.select_related("team", "local_queue").filter(pk=job_id).first()
        if job is None or job.state not in ACTIVE_STATES:
            return
        self._start_pods(job, self.pods_for(job))

    def _start_pods(self, job: Job, manifests: list[dict], *, skip_create: bool = False) -> int:
        """Create (unless ``skip_create``) and bind ``manifests``; returns pods created. A refusal (403
        RBAC, 422 invalid) is logged and skipped so other jobs still start: the sweeper requeues the
        job if it persists. Retryable failures (:class:`ClusterApiError`) propagate, and the task
        retries."""
        created = 0
        for manifest in manifests:
            try:
                created += self.create_and_bind(manifest, skip_create=skip_create).created
            except ApiException as exc:
                logger.warning(
                    "kubernetes: job %s: cannot start pod %s/%s: %s %s",
                    job.pk,
                    manifest["metadata"]["namespace"],
                    manifest["metadata"]["name"],
                    exc.status,
                    exc.reason,
                )
        return created

    def delete_pod(self, namespace: str, name: str, *, grace_s: int) -> bool:
        """Delete one pod with a grace period; False if it was already gone."""
        try:
            self._call(
                lambda: self.core.delete_namespaced_pod(
                    name,
                    namespace,
                    grace_period_seconds=grace_s,
                    _preload_content=False,
                    _request_timeout=self._timeout,
                ),
                f"delete pod {namespace}/{name}",
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            return False
        return True

    def stop(self, *, job_id: int, grace_s: int) -> None:
        """Delete the pods of the job's current attempt (names are derived, so no cache is needed)."""
        job = Job.objects.select_related("team").filter(pk=job_id).first()
        if job is None or job.attempt == 0:
            return
        for replica in range(job.replicas):
            self.delete_pod(job.team.namespace, ko.pod_name(job.pk, job.attempt, replica), grace_s=grace_s)

    def reconcile(self, *, now: datetime) -> dict[str, int]:
        """Converge the cluster on the database: create missing pods, delete orphaned ones.

        Called under the cycle lock, after the observations were applied. Pods are read before jobs
        (see ``observe``). A pod is an orphan when its job is unknown, or when it still runs (or
        waits) while its job is not admitted or running or is on another attempt; it is deleted with
        the grace period. Finished pods of known jobs are kept for their logs. An admitted job
        missing pods gets them (409 for the ones that exist), and its created but unbound pods are bound.
        """
        self.sync()
        pods = self.raw_pods()
        by_key: dict[tuple[int, int], set[str]] = {}
        unbound: dict[tuple[int, int], set[str]] = {}
        managed: list[dict] = []
        for pod in pods:
            key = ko.pod_job_attempt(pod)
            if key is None:
                continue
            managed.append(pod)
            by_key.setdefault(key, set()).add(pod["metadata"]["name"])
            if not (pod.get("spec") or {}).get("nodeName") and not pod["metadata"].get("deletionTimestamp"):
                unbound.setdefault(key, set()).add(pod["metadata"]["name"])
        jobs = {
            job_id: (attempt, state)
            for job_id, attempt, state in Job.objects.filter(
                pk__in={k[0] for k in by_key}
                | set(Job.objects.filter(state=JobState.ADMITTED).values_list("id", flat=True))
            ).values_list("id", "attempt", "state")
        }
        counts = {"created": 0, "deleted": 0}
        for pod in managed:
            job_id, attempt = ko.pod_job_attempt(pod)  # type: ignore[misc]
            current = jobs.get(job_id)
            if current is not None and current[0] == attempt and current[1] in ACTIVE_STATES:
                continue
            if pod["metadata"].get("deletionTimestamp"):
                continue  # already terminating
            if current is not None and ko.pod_phase(pod) in ("Succeeded", "Failed"):
                continue  # holds nothing; kept so its logs can be read (the cluster's pod GC removes it)
            meta = pod["metadata"]
            try:
                counts["deleted"] += self.delete_pod(meta["namespace"], meta["name"], grace_s=self.options.grace_s)
            except ApiException as exc:
                logger.warning("kubernetes: cannot delete orphan %s/%s: %s", meta["namespace"], meta["name"], exc)
        admitted = [job_id for job_id, (_, state) in jobs.items() if state == JobState.ADMITTED]
        for job in Job.objects.select_related("team", "local_queue").filter(pk__in=admitted, state=JobState.ADMITTED):
            existing = by_key.get((job.pk, job.attempt), set())
            stranded = unbound.get((job.pk, job.attempt), set())
            manifests = self.pods_for(job)
            missing = [m for m in manifests if m["metadata"]["name"] not in existing]
            counts["created"] += self._start_pods(job, missing)
            # Created, but the bind failed (an API outage after the create): only the bind is retried.
            self._start_pods(job, [m for m in manifests if m["metadata"]["name"] in stranded], skip_create=True)
        return counts

    # -- inspection (manage.py cluster_check) -----------------------------------------------------

    def access_review(self, *, verb: str, resource: str, namespace: str = "", subresource: str = "") -> bool:
        """Whether the portal's identity may do ``verb`` on ``resource`` (a SelfSubjectAccessReview)."""
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {
                "resourceAttributes": {
                    "verb": verb,
                    "resource": resource,
                    "namespace": namespace,
                    "subresource": subresource,
                }
            },
        }
        api = client.AuthorizationV1Api(self.api_client)
        response = self._call(
            lambda: api.create_self_subject_access_review(body, _preload_content=False, _request_timeout=self._timeout),
            f"access review {verb} {resource}",
        )
        return bool((json.loads(response.data).get("status") or {}).get("allowed"))
