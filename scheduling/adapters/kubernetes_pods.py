"""Writing the portal's pods on Kubernetes: create, bind, delete (what ``start``, ``stop`` and
``reconcile`` do to pods).

- an admitted job becomes one pod per replica in its team's namespace, named from the job id,
  attempt and replica (a retried create that gets 409 AlreadyExists is success), with the portal as
  ``schedulerName``, then is bound to the chosen node through the Binding API (409: already bound);
- stopping deletes the attempt's pods with a grace period (404: already gone);
- the pods this process bound lately are remembered until the pod cache must have seen them
  (client-go's "expectations"), so reconcile does not create and bind them again meanwhile.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from django.utils import timezone
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from portal.jobs.models import Job
from scheduling.adapters import workloads
from scheduling.adapters.contract import job_tolerations
from scheduling.adapters.k8s.manifests import PodJob, binding_manifest, event_manifest, pod_manifest
from scheduling.adapters.k8s.pods import ANN_NODE
from scheduling.adapters.k8s.training import procs_per_node
from scheduling.adapters.kubernetes_api import NETWORK_ERRORS, K8sOptions, logger, read_body


@dataclass(frozen=True, slots=True)
class StartResult:
    created: int = 0
    existed: int = 0
    bound: int = 0


class PodWriter:
    def __init__(self, core: client.CoreV1Api, options: K8sOptions, *, expect_s: float) -> None:
        self.core = core
        self.options = options
        self.expect_s = expect_s  # how long a bound pod is expected before the cache must show it
        # Pods this process bound, by name, until the cache shows them (client-go's "expectations"):
        # reconcile does not create and bind them again while the watch has not delivered them yet.
        self._bound: dict[str, float] = {}  # name -> monotonic deadline
        self._bound_order: deque[tuple[float, str]] = deque()
        self._lock = threading.Lock()

    def pod_job(self, job: Job, replicas: int) -> PodJob:  # also a Ray object's (``RayJobs``)
        return PodJob(
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
            tolerations=tuple(job_tolerations(job.tolerations or [], spot=job.spot)),
            node_selector=tuple(sorted((job.node_selector or {}).items())),
            labels=tuple(sorted((getattr(job, "labels", None) or {}).items())),
            rules=workloads.job_rules(job),
            kind=job.kind,
            procs_per_node=procs_per_node(gpu=job.gpu),
            checkpoint_path=job.checkpoint_path,
        )

    def pods_for(self, job: Job) -> list[dict]:
        """The manifests of a job's current attempt, from its placements.

        ``PORTAL_REPLICAS`` is the number of placements: a gang with ``min_available`` may have been
        admitted with fewer replicas than it asked for, and its pods must not wait for the others.
        """
        placements = sorted(job.placements.all(), key=lambda p: p.replica)  # prefetched by ``start_many``
        pod_job = self.pod_job(job, len(placements))
        return [
            pod_manifest(
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
        node = manifest["metadata"]["annotations"][ANN_NODE]
        created = existed = 0
        uid = ""
        if not skip_create:
            try:
                body = self.options.call(
                    lambda: read_body(
                        self.core.create_namespaced_pod(
                            namespace, manifest, _preload_content=False, _request_timeout=self.options.request_timeout
                        )
                    ),
                    f"create pod {namespace}/{name}",
                )
                uid = (json.loads(body).get("metadata") or {}).get("uid", "")
                created = 1
            except ApiException as exc:
                if exc.status != 409:
                    raise
                existed = 1
        bound = 0
        try:
            self.options.call(
                lambda: read_body(
                    self.core.create_namespaced_pod_binding(
                        name,
                        namespace,
                        binding_manifest(name, namespace, node),
                        _preload_content=False,
                        _request_timeout=self.options.request_timeout,
                    )
                ),
                f"bind pod {namespace}/{name} to {node}",
            )
            bound = 1
            self._expect_bound(name)
        except ApiException as exc:
            if exc.status != 409:
                raise
            self._expect_bound(name)
        if bound:
            self.event(namespace, name, uid, "Scheduled", f"Successfully assigned {namespace}/{name} to {node}")
        return StartResult(created=created, existed=existed, bound=bound)

    def _expect_bound(self, name: str) -> None:
        """Remember that pod ``name`` is created and bound until the pod cache must have seen it."""
        deadline = time.monotonic() + self.expect_s
        with self._lock:
            self._bound[name] = deadline
            self._bound_order.append((deadline, name))

    def expected_bound(self) -> set[str]:
        """The pods this process created and bound lately (their expectations not expired)."""
        now = time.monotonic()
        with self._lock:
            while self._bound_order and self._bound_order[0][0] <= now:
                deadline, name = self._bound_order.popleft()
                if self._bound.get(name) == deadline:
                    del self._bound[name]
            return set(self._bound)

    def event(self, namespace: str, pod: str, uid: str, reason: str, message: str) -> None:
        """Best effort: an event is for people reading ``kubectl describe``; losing one loses nothing."""
        body = event_manifest(
            pod=pod,
            namespace=namespace,
            uid=uid,
            reason=reason,
            message=message,
            at=timezone.now(),
            source=self.options.scheduler_name,
        )
        try:
            read_body(
                self.core.create_namespaced_event(
                    namespace, body, _preload_content=False, _request_timeout=self.options.request_timeout
                )
            )
        except (ApiException, *NETWORK_ERRORS) as exc:
            logger.info("kubernetes: event %s for %s/%s not recorded: %s", reason, namespace, pod, exc)

    def start_all(self, work: list[tuple[Job, dict]]) -> None:
        """Create and bind each ``(job, manifest)`` of ``work``, ``start_threads`` at once; every pod is
        tried, then the first retryable failure is raised (``KubernetesBackend.start_many``)."""
        if len(work) <= 1 or self.options.start_threads <= 1:
            for job, manifest in work:
                self.start_pods(job, [manifest])
            return
        with ThreadPoolExecutor(max_workers=min(self.options.start_threads, len(work))) as pool:
            futures = [pool.submit(self.start_pods, job, [manifest]) for job, manifest in work]
            errors = [error for future in futures if (error := future.exception()) is not None]
        if errors:
            raise errors[0]

    def start_pods(self, job: Job, manifests: list[dict], *, skip_create: bool = False) -> int:
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
            self.options.call(
                lambda: read_body(
                    self.core.delete_namespaced_pod(
                        name,
                        namespace,
                        grace_period_seconds=grace_s,
                        _preload_content=False,
                        _request_timeout=self.options.request_timeout,
                    )
                ),
                f"delete pod {namespace}/{name}",
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            return False
        return True
