"""Ray jobs on Kubernetes: KubeRay's ``ray.io/v1`` RayJob and RayCluster objects, through the client's
CustomObjectsApi (``k8s.ray_objects`` builds and reads them).

- ``create``: POST the attempt's object (409 AlreadyExists: a retried create, success);
- ``delete``: DELETE it in the foreground, so KubeRay's pods go with it (404: already gone);
- ``live``: every RayJob and RayCluster the portal made, by (job id, attempt), in one LIST per kind.

``RayJobs`` is what the backend does with them: start (create), stop (delete), observe (a lost node,
then the object's status) and converge in reconcile (create what an admitted attempt misses, delete
the objects of finished jobs and older attempts).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime
from functools import partial
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from portal.jobs.models import Job
from portal.jobs.states import ACTIVE_STATES, JobState
from scheduling.adapters.contract import SPOT, Observation, Reclaim, node_lost_observation
from scheduling.adapters.k8s.manifests import PodJob
from scheduling.adapters.k8s.pods import LABEL_ATTEMPT, LABEL_JOB, MANAGED_BY
from scheduling.adapters.k8s.ray_objects import (
    RAY_GROUP,
    RAY_VERSION,
    ray_manifest,
    ray_object_name,
    ray_observation,
    ray_plural,
)
from scheduling.adapters.kubernetes_api import K8sOptions, logger, read_body

PLURALS = ("rayjobs", "rayclusters")


class RayWriter:
    def __init__(self, api_client: client.ApiClient, options: K8sOptions) -> None:
        self.custom = client.CustomObjectsApi(api_client)
        self.options = options

    def create(self, plural: str, body: dict) -> bool:
        """Create one object; True if created, False if it existed. A refusal (403, 422) is logged: the
        sweeper requeues a job whose pods never ran."""
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        try:
            self.options.call(
                lambda: read_body(
    self.custom.create_namespaced_custom_object(
                    RAY_GROUP, RAY_VERSION, namespace, plural, body, _preload_content=False,
                    _request_timeout=self.options.request_timeout,
                )),
                f"create {plural} {namespace}/{name}",
            )  # fmt: skip
        except ApiException as exc:
            if exc.status != 409:
                logger.warning(
                    "kubernetes: cannot create %s %s/%s: %s %s", plural, namespace, name, exc.status, exc.reason
                )
            return False
        return True

    def delete(self, plural: str, namespace: str, name: str) -> bool:
        """Delete one object and, through KubeRay's owner references, its pods; False if it was gone."""
        try:
            self.options.call(
                lambda: read_body(
    self.custom.delete_namespaced_custom_object(
                    RAY_GROUP, RAY_VERSION, namespace, plural, name, propagation_policy="Foreground",
                    grace_period_seconds=self.options.grace_s, _preload_content=False,
                    _request_timeout=self.options.request_timeout,
                )),
                f"delete {plural} {namespace}/{name}",
            )  # fmt: skip
        except ApiException as exc:
            if exc.status != 404:
                raise
            return False
        return True

    def _list(self, plural: str, selector: str) -> Any:
        return self.custom.list_cluster_custom_object(
            RAY_GROUP, RAY_VERSION, plural, label_selector=selector, _preload_content=False,
            _request_timeout=self.options.request_timeout,
        )  # fmt: skip

    def live(self) -> dict[tuple[int, int], tuple[str, dict]]:
        """The portal's Ray objects by (job id, attempt): (plural, object)."""
        selector = f"{MANAGED_BY[0]}={MANAGED_BY[1]},{LABEL_JOB}"
        found: dict[tuple[int, int], tuple[str, dict]] = {}
        for plural in PLURALS:
            response = self.options.call(partial(self._list, plural, selector), f"list {plural}")
            for item in json.loads(response.data).get("items") or []:
                labels = (item.get("metadata") or {}).get("labels") or {}
                job, attempt = str(labels.get(LABEL_JOB, "")), str(labels.get(LABEL_ATTEMPT, ""))
                if job.isdigit() and attempt.isdigit():
                    found[(int(job), int(attempt))] = (plural, item)
        return found


class RayJobs:
    """The Kubernetes backend's side for Ray jobs: start, stop, observe and converge their objects."""

    def __init__(self, writer: RayWriter, options: K8sOptions, pod_job: Callable[[Job, int], PodJob]) -> None:
        self.writer = writer
        self.options = options
        self.pod_job = pod_job  # the backend's PodJob of a job row (namespace, labels, image, tolerations)

    def manifest(self, job: Job) -> tuple[str, dict]:
        placements = [p.engine_placement() for p in sorted(job.placements.all(), key=lambda p: p.replica)]
        body = ray_manifest(
            self.pod_job(job, len(placements)), job.ray or {}, placements, run_as_user=self.options.run_as_user
        )
        return ray_plural(job.ray or {}), body

    def start(self, job: Job) -> bool:
        """Create the attempt's RayJob or RayCluster (idempotent)."""
        return self.writer.create(*self.manifest(job))

    def stop(self, job: Job) -> None:
        """Delete the current attempt's object (404: already gone)."""
        self.writer.delete(ray_plural(job.ray or {}), job.team.namespace, ray_object_name(job.pk, job.attempt))

    def observe(self, *, now: datetime, node_names: set[str], reclaims: Mapping[str, Reclaim]) -> list[Observation]:
        """Each active Ray attempt: a lost or reclaimed node first (as for pods), then its object's status."""
        jobs = list(Job.objects.filter(kind=Job.Kind.RAY, state__in=ACTIVE_STATES).prefetch_related("placements"))
        if not jobs:
            return []
        live = self.writer.live()
        observations = []
        for job in jobs:
            requeue = job.restart_policy == Job.RestartPolicy.REQUEUE
            lost = sorted({p.node for p in job.placements.all() if p.node not in node_names or p.node in reclaims})
            if lost and job.state == JobState.RUNNING:
                gone = node_lost_observation(
                    job_id=job.pk, attempt=job.attempt, node=lost[0], notice=reclaims.get(lost[0]), now=now,
                    requeue=requeue, spot=job.capacity_type == SPOT, resume_hint=job.resume_hint(),
                )  # fmt: skip
                observations.append(gone)
                continue
            found = live.get((job.pk, job.attempt))
            seen = ray_observation(
                job_id=job.pk, attempt=job.attempt, state=job.state, obj=found[1] if found else None,
                requeue=requeue, now=now,
            )  # fmt: skip
            if seen is not None:
                observations.append(seen)
        return observations

    def converge(self) -> dict[str, int]:
        """Reconcile's step for Ray: an object for every admitted Ray attempt, none for any other."""
        live = self.writer.live()
        active = {
            (job.pk, job.attempt): job
            for job in Job.objects.select_related("team", "local_queue")
            .prefetch_related("placements")
            .filter(kind=Job.Kind.RAY, state__in=ACTIVE_STATES)
        }
        created = sum(
            self.start(job) for key, job in active.items() if key not in live and job.state == JobState.ADMITTED
        )
        deleted = 0
        for key, (plural, obj) in live.items():
            if key not in active:
                meta = obj["metadata"]
                deleted += self.writer.delete(plural, meta["namespace"], meta["name"])
        return {"ray_created": created, "ray_deleted": deleted}
