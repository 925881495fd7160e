"""The Kubernetes cluster backend: reads the cluster through two caches, writes pods through the API.

The ``scheduling.adapters.kubernetes*`` modules are the only ones that import the ``kubernetes``
client: this one (the backend), ``kubernetes_api`` (configuration, calls with retries),
``kubernetes_informer`` (the caches), and the writers of pods, team namespaces, Services and Ray
objects (``kubernetes_pods``, ``kubernetes_namespaces``, ``kubernetes_services``, ``kubernetes_ray``). The pure
``scheduling.adapters.k8s`` package translates what they read and write.

Reading the cluster (``nodes``, ``foreign_usage``, ``observe``):

1. Each process keeps two caches, nodes and pods (``Informer``: LIST, then WATCH from the list's
   resourceVersion in a daemon thread; relist on 410 Gone; every call with a client-side timeout),
   each started when first read: a web process, which reads nodes only, keeps no pod cache.
2. The caches are eventually consistent, as every Kubernetes controller's are; everything written
   from them is idempotent or re-checked against the database (see ``reconcile``). Before a cycle
   reads them, ``sync`` relists a cache whose watch has been out of contact for longer than one watch
   plus its timeouts (a dead thread, an API outage), and an API that stays down fails the cycle.
3. The pod cache keeps the portal's pods by job attempt and tells ``observe`` and ``reconcile``
   which attempts' pods changed since each last looked: each looks at those jobs only (their rows,
   their pods), so a pass costs what changed, not what exists. Each makes a full pass over every
   pod and job after a relist, when the nodes changed (``observe``), and at least every
   ``K8S_RESYNC_S`` (the resync period of Kubernetes' controllers): that catches what no pod event
   announces (a job cancelled while its pods' delete failed) and any change a pass missed. A pass
   that fails gives its changes back, so the next one takes them again (``observe``'s: until
   ``observed`` says its observations were applied).

Writing the cluster (``start``, ``stop``, ``reconcile``):

- an admitted job becomes one pod per replica, created then bound to the chosen node, and stopping
  deletes the attempt's pods (``kubernetes_pods``: names, 409s and 404s, the pods bound lately);
- ``reconcile`` converges after any crash: pods missing for an admitted job are created and its
  unbound ones bound; pods of unknown jobs, and live pods of finished jobs or older attempts, are
  deleted;
- a training job's headless Service is created before its workers (``kubernetes_services``);
- a Ray job is one KubeRay object instead of pods (``kubernetes_ray``): created on start, deleted on
  stop, observed through its status, converged by reconcile.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import TypeVar

from django.db.models import Prefetch
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from portal.jobs.models import GpuModel, Job, ReplicaPlacement
from portal.jobs.states import ACTIVE_STATES, JobState
from scheduling.adapters.contract import SPOT, Observation, termination_notice
from scheduling.adapters.k8s.namespaces import NamespaceObjects, ObjectReport
from scheduling.adapters.k8s.nodes import gpu_node_from
from scheduling.adapters.k8s.observations import ActiveJob, job_observations
from scheduling.adapters.k8s.pods import pod_job_attempt, pod_name, pod_phase
from scheduling.adapters.k8s.usage import foreign_usage_from
from scheduling.adapters.kubernetes_api import K8sOptions, api_client_from_settings, call, logger
from scheduling.adapters.kubernetes_informer import Changes, Informer
from scheduling.adapters.kubernetes_namespaces import NamespaceWriter
from scheduling.adapters.kubernetes_pods import PodWriter, StartResult
from scheduling.adapters.kubernetes_ray import RayJobs, RayWriter
from scheduling.adapters.kubernetes_services import ServiceWriter
from scheduling.engine.model import ForeignUsage, GpuNode

T = TypeVar("T")

OBSERVE, RECONCILE = "observe", "reconcile"  # the pod cache's two subscribers (module docstring, step 3)


def _unbound(pod: dict) -> bool:
    """Created, never bound, and not on its way out."""
    return not (pod.get("spec") or {}).get("nodeName") and not pod["metadata"].get("deletionTimestamp")


class KubernetesBackend:
    """A :class:`~scheduling.adapters.contract.ClusterBackend` over the Kubernetes API."""

    name = "kubernetes"

    def __init__(self, *, api_client: client.ApiClient, options: K8sOptions | None = None) -> None:
        self.options = options or K8sOptions()
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.node_informer = Informer("nodes", self.core.list_node, self.options)
        self.pod_informer = Informer("pods", self.core.list_pod_for_all_namespaces, self.options, index=pod_job_attempt)
        for subscriber in (OBSERVE, RECONCILE):
            self.pod_informer.subscribe(subscriber)
        self._full_pass_at = {OBSERVE: float("-inf"), RECONCILE: float("-inf")}  # monotonic; -inf: the next is full
        self._node_view: tuple | None = None  # the node names and termination notices ``observe`` last saw
        self._observing: Changes | None = None  # the last ``observe``'s changes, until ``observed``
        self._nodes: tuple[tuple, list[GpuNode]] | None = None  # (version, the nodes converted)
        self._kinds_active: set[str] = set()  # training or Ray jobs active when ``observe`` last looked
        self._kinds_reconciled: set[str] = set()  # the same, when ``reconcile`` last did
        self.services = ServiceWriter(self.core, self.options)
        self.pods = PodWriter(self.core, self.options, expect_s=self._cache_max_age_s)
        self.ray = RayJobs(RayWriter(api_client, self.options), self.options, self.pods.pod_job)
        self._started: set[str] = set()  # the informers started, by name
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

    def _ensure_started(self, *informers: Informer) -> None:
        """Start the given informers once each, when first read: a web process reads only nodes (a
        submission's "never fits" test) and so never lists and watches every pod, whose events (a
        few per pod started) would cost each web process CPU as the scheduler starts jobs."""
        with self._lock:
            for informer in informers:
                if informer.name not in self._started:
                    informer.start()
                    self._started.add(informer.name)

    @property
    def _cache_max_age_s(self) -> float:
        """How long a cache may go without news before it is relisted: one watch plus its timeouts."""
        return self.options.watch_timeout_s + 2 * self.options.timeout_s + self.options.sync_timeout_s

    def sync(self) -> None:
        """Make sure both caches are filled and alive (see the module docstring, step 2)."""
        self._ensure_started(self.node_informer, self.pod_informer)
        self.node_informer.ensure_fresh(self._cache_max_age_s)
        self.pod_informer.ensure_fresh(self._cache_max_age_s)

    def raw_nodes(self) -> list[dict]:
        self._ensure_started(self.node_informer)
        return sorted(self.node_informer.items(), key=lambda n: n["metadata"]["name"])

    def raw_pods(self) -> list[dict]:
        self._ensure_started(self.pod_informer)
        return self.pod_informer.items()

    def nodes(self) -> list[GpuNode]:
        """The nodes as the engine sees them; converted again only when the node cache or the GPU
        models changed (a cycle reads them twice: its snapshot and ``foreign_usage``)."""
        known = list(GpuModel.objects.values_list("name", flat=True))
        self._ensure_started(self.node_informer)
        version = (self.node_informer.identity, self.node_informer.changes, tuple(known))
        cached = self._nodes
        if cached is not None and cached[0] == version:
            return list(cached[1])
        nodes = [gpu_node_from(node, known_models=known) for node in self.raw_nodes()]
        self._nodes = (version, nodes)
        return list(nodes)

    def nodes_version(self) -> tuple[int, int]:
        """Changes whenever the node cache does (so may ``nodes``, with the ``GpuModel`` rows, which
        the callers version themselves): a submission's "never fits" test keeps its answers while it
        is the same, instead of converting every node again (``selectors._feasibility``)."""
        self._ensure_started(self.node_informer)
        return (self.node_informer.identity, self.node_informer.changes)

    def foreign_usage(self) -> list[ForeignUsage]:
        active = set(Job.objects.filter(state__in=ACTIVE_STATES).values_list("id", "attempt"))
        held: dict[str, set[int]] = {}
        for node, indices in ReplicaPlacement.objects.filter(job__state__in=ACTIVE_STATES).values_list(
            "node", "gpu_indices"
        ):
            held.setdefault(node, set()).update(indices)
        # Only pods outside the active attempts hold capacity the placements do not: the foreign ones
        # and the portal's of inactive attempts, from the index (not every pod of the cache).
        self._ensure_started(self.pod_informer)
        informer = self.pod_informer
        pods = informer.indexed(None) + [
            pod for key in informer.index_keys() if key not in active for pod in informer.indexed(key)
        ]
        return foreign_usage_from(pods, self.nodes(), active=active, held=held)

    def _changes(self, subscriber: str, *, everything: bool = False) -> Changes:
        """The job attempts whose pods changed since ``subscriber``'s last pass; everything after a
        relist, when asked, or when its last full pass is ``K8S_RESYNC_S`` old (module docstring, 3)."""
        changes = self.pod_informer.take_changes(subscriber)
        now = time.monotonic()
        if everything or now - self._full_pass_at[subscriber] >= self.options.resync_s:
            changes.everything = True
        if changes.everything:
            self._full_pass_at[subscriber] = now
        return changes

    def _active_jobs(self, job_ids: set[int] | None = None) -> list[ActiveJob]:
        """The admitted and running attempts (of ``job_ids`` only, when given)."""
        jobs = Job.objects.filter(state__in=ACTIVE_STATES).exclude(kind=Job.Kind.RAY)
        placements = ReplicaPlacement.objects.filter(job__state__in=ACTIVE_STATES)
        if job_ids is not None:
            if not job_ids:
                return []
            jobs, placements = jobs.filter(pk__in=job_ids), placements.filter(job_id__in=job_ids)
        counts: dict[int, int] = {}
        for job_id in placements.values_list("job_id", flat=True):
            counts[job_id] = counts.get(job_id, 0) + 1
        rows = jobs.only(
            "id", "attempt", "state", "replicas", "min_available", "restart_policy", "capacity_type", "checkpoint_path"
        )
        return [
            ActiveJob(
                job_id=job.pk,
                attempt=job.attempt,
                state=job.state,
                replicas=counts.get(job.pk, job.replicas),
                gang_size=min(job.gang_size, counts.get(job.pk, job.replicas)),
                requeue=job.restart_policy == Job.RestartPolicy.REQUEUE,
                spot=job.capacity_type == SPOT,
                resume_hint=job.resume_hint(),
            )
            for job in rows
        ]

    def observe(self, *, now: datetime) -> list[Observation]:
        """What the pods of the active job attempts say; only those whose pods changed since the last
        pass, unless it is a full one (module docstring, step 3)."""
        self.sync()
        nodes = self.raw_nodes()
        node_names = {n["metadata"]["name"] for n in nodes}
        reclaims = {
            notice.node: notice
            for node in nodes
            if (notice := termination_notice(node["metadata"]["name"], (node.get("spec") or {}).get("taints") or []))
        }
        self._kinds_active = self._active_kinds()  # for ``reconcile``: these jobs may end in this sync
        if self._observing is not None:  # the last pass's observations were never applied: again
            self.pod_informer.give_back(OBSERVE, self._observing)
        # A lost or reclaimed node concerns every job on it, whichever pods changed.
        node_view = (frozenset(node_names), tuple(sorted(reclaims.items())))
        if node_view != self._node_view:
            # ...and so does reconcile: the pods of a job requeued off a lost node never changed.
            self._full_pass_at[RECONCILE] = float("-inf")
        changes = self._observing = self._changes(OBSERVE, everything=node_view != self._node_view)
        self._node_view = node_view
        if changes.everything:
            # Pods first, then the database: a pod in the cache was created after its job's admission
            # committed, so the job rows read next are at least that new.
            pods = self.raw_pods()
            jobs = self._active_jobs()
        else:
            # The rows first: each job's pods are then looked up under the attempt its row has.
            jobs = self._active_jobs({job_id for job_id, _ in changes.keys})
            pods = [pod for job in jobs for pod in self.pod_informer.indexed((job.job_id, job.attempt))]
        observations = job_observations(jobs, pods, node_names, now=now, reclaims=reclaims)
        # Ray jobs: KubeRay's objects say how they are doing (``kubernetes_ray``).
        return observations + self.ray.observe(now=now, node_names=node_names, reclaims=reclaims)

    def observed(self) -> None:
        """The last ``observe``'s observations were applied: its changes are done with."""
        self._observing = None

    # -- writing (pods: ``kubernetes_pods``) ------------------------------------------------------

    def create_and_bind(self, manifest: dict, *, skip_create: bool = False) -> StartResult:
        """Create one pod and bind it to its node (``PodWriter.create_and_bind``)."""
        return self.pods.create_and_bind(manifest, skip_create=skip_create)

    def start(self, *, job_id: int) -> None:
        """Create and bind the pods of an admitted job's current attempt (idempotent)."""
        self.start_many(job_ids=[job_id])

    def start_many(self, *, job_ids: list[int]) -> None:
        """``start`` for many jobs (a cycle's admissions): their rows in two queries, their pods
        created and bound by ``start_threads`` threads at once (each pod's create, bind and event are
        three round trips to the API server; one after the other, 4,000 pods take minutes).

        Every pod is tried; then the first retryable failure (:class:`ClusterApiError`) is raised, as
        ``start`` raises it, and ``reconcile`` creates what is still missing."""
        jobs = (
            Job.objects.select_related("team", "local_queue")
            .prefetch_related(Prefetch("placements", queryset=ReplicaPlacement.objects.order_by("replica")))
            .filter(pk__in=job_ids, state__in=ACTIVE_STATES)
            .order_by("pk")
        )
        work = []
        for job in jobs:
            if job.kind == Job.Kind.RAY:
                self.ray.start(job)  # KubeRay creates the pods
                continue
            if job.kind == Job.Kind.TRAINING:
                self.services.ensure(job)  # before its workers, which resolve each other through it
            work += [(job, manifest) for manifest in self.pods.pods_for(job)]
        self.pods.start_all(work)

    def stop(self, *, job_id: int, grace_s: int) -> None:
        """Delete the pods of the job's current attempt (names are derived, so no cache is needed)."""
        job = Job.objects.select_related("team").filter(pk=job_id).first()
        if job is None or job.attempt == 0:
            return
        if job.kind == Job.Kind.RAY:
            self.ray.stop(job)  # and KubeRay's pods with it
            return
        for replica in range(job.replicas):
            self.pods.delete_pod(job.team.namespace, pod_name(job.pk, job.attempt, replica), grace_s=grace_s)

    def reconcile(self, *, now: datetime) -> dict[str, int]:
        """Converge the cluster on the database: create missing pods, delete orphaned ones.

        Called under the cycle lock, after the observations were applied. A pod is an orphan when its
        job is unknown, or when it still runs (or waits) while its job is not admitted or running or
        is on another attempt; it is deleted with the grace period. Finished pods of known jobs are
        kept for their logs. An admitted job missing pods gets them (409 for the ones that exist),
        and its created but unbound pods are bound. Orphans are looked for among the attempts whose
        pods changed since the last pass, or all of them in a full pass (module docstring, step 3).
        """
        self.sync()
        changes = self._changes(RECONCILE)
        try:
            # 1-2. the pods of the changed attempts, and their jobs: delete the orphans
            deleted = self._delete_orphans(changes)
            # 3. create and bind the pods admitted jobs miss
            created = self._create_missing()
        except BaseException:
            self.pod_informer.give_back(RECONCILE, changes)  # the next pass looks at them again
            raise
        # Steps 4-5 list their objects from the API (no cache keeps them): only in a full pass, or while
        # a job of their kind is active or was at the last ``observe`` or reconcile (it may just have ended).
        active = self._active_kinds()
        kinds = active | self._kinds_active | self._kinds_reconciled
        self._kinds_reconciled = active
        # 4. the headless Services of training jobs: made for active ones, deleted for the others
        services = self.services.converge() if changes.everything or Job.Kind.TRAINING.value in kinds else {}
        # 5. the KubeRay objects of Ray jobs: made for admitted ones, deleted for the others
        ray = self.ray.converge() if changes.everything or Job.Kind.RAY.value in kinds else {}
        return {"created": created, "deleted": deleted, **services, **ray}

    @staticmethod
    def _active_kinds() -> set[str]:
        """Which of the kinds with objects besides pods (training, Ray) some active job has."""
        return set(
            Job.objects.filter(state__in=ACTIVE_STATES, kind__in=[Job.Kind.TRAINING, Job.Kind.RAY])
            .order_by()
            .values_list("kind", flat=True)
            .distinct()
        )

    def _delete_orphans(self, changes: Changes) -> int:
        """Reconcile, steps 1-2: delete live pods of unknown jobs, inactive jobs or older attempts.
        Pods are read before jobs (see ``observe``)."""
        keys = self.pod_informer.index_keys() if changes.everything else changes.keys
        managed = [pod for key in keys for pod in self.pod_informer.indexed(key)]
        if not managed:
            return 0
        jobs = {
            job_id: (attempt, state)
            for job_id, attempt, state in Job.objects.filter(pk__in={job_id for job_id, _ in keys}).values_list(
                "id", "attempt", "state"
            )
        }
        deleted = 0
        for pod in managed:
            job_id, attempt = pod_job_attempt(pod)  # type: ignore[misc]
            current = jobs.get(job_id)
            if current is not None and current[0] == attempt and current[1] in ACTIVE_STATES:
                continue
            if pod["metadata"].get("deletionTimestamp"):
                continue  # already terminating
            if current is not None and pod_phase(pod) in ("Succeeded", "Failed"):
                continue  # holds nothing; kept so its logs can be read (the cluster's pod GC removes it)
            meta = pod["metadata"]
            try:
                deleted += self.pods.delete_pod(meta["namespace"], meta["name"], grace_s=self.options.grace_s)
            except ApiException as exc:
                logger.warning("kubernetes: cannot delete orphan %s/%s: %s", meta["namespace"], meta["name"], exc)
        return deleted

    def _create_missing(self) -> int:
        """Reconcile, step 3: create an admitted job's missing pods and bind its unbound ones.

        Every admitted attempt is checked, from one query of its placements and the pod cache's index
        (a job whose worker died after the admission committed has no pod event to announce it); a
        pod this process bound lately counts as there until the cache shows it (``PodWriter``).
        Only the jobs missing something are read in full."""
        wanted: dict[tuple[int, int], set[str]] = {}
        for job_id, attempt, replica in (
            ReplicaPlacement.objects.filter(job__state=JobState.ADMITTED)
            .exclude(job__kind=Job.Kind.RAY)  # KubeRay makes a Ray job's pods (step 5)
            .values_list("job_id", "job__attempt", "replica")
        ):
            wanted.setdefault((job_id, attempt), set()).add(pod_name(job_id, attempt, replica))
        expected = self.pods.expected_bound()
        short: dict[int, tuple[set[str], set[str]]] = {}  # job id -> (its pods' names, the unbound ones)
        for key, names in wanted.items():
            pods = self.pod_informer.indexed(key)
            existing = {p["metadata"]["name"] for p in pods}
            stranded = {p["metadata"]["name"] for p in pods if _unbound(p)} - expected
            if names <= existing | expected and not stranded:
                continue  # every pod made and bound (most admitted jobs: their pods just have not run yet)
            short[key[0]] = (existing, stranded)
        if not short:
            return 0
        created = 0
        jobs = (
            Job.objects.select_related("team", "local_queue")
            .prefetch_related(Prefetch("placements", queryset=ReplicaPlacement.objects.order_by("replica")))
            .filter(pk__in=short, state=JobState.ADMITTED)
        )
        for job in jobs:
            existing, stranded = short[job.pk]
            manifests = self.pods.pods_for(job)
            missing = [m for m in manifests if m["metadata"]["name"] not in existing | expected]
            created += self.pods.start_pods(job, missing)
            # Created, but the bind failed (an API outage after the create): only the bind is retried.
            self.pods.start_pods(job, [m for m in manifests if m["metadata"]["name"] in stranded], skip_create=True)
        return created

    # -- inspection (manage.py cluster_check) -----------------------------------------------------

    def namespaces_sync(self, wanted: list[NamespaceObjects]) -> list[ObjectReport]:
        """Bring each team namespace's ResourceQuota and LimitRange in step (``kubernetes_namespaces``)."""
        return NamespaceWriter(self.core, self.options).sync(wanted)

    def access_review(self, *, verb: str, resource: str, namespace: str = "", subresource: str = "") -> bool:
        """Whether the portal's identity may do ``verb`` on ``resource`` (a SelfSubjectAccessReview);
        ``resource.group`` for another API group's (``rayjobs.ray.io``)."""
        resource, _, group = resource.partition(".")
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {
                "resourceAttributes": {
                    "verb": verb,
                    "group": group,
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
