"""Training jobs' headless Services on Kubernetes (their workers resolve each other through them).

- ``ensure``: POST the job's Service before its workers start (409 AlreadyExists: success);
- ``converge`` (reconcile, step 5): a Service for every active training job, none for any other job;
- a refusal (403 RBAC, 422) is logged, never raised: the workers still start and reconcile tries again.
"""

from __future__ import annotations

import json

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from portal.jobs.models import Job
from portal.jobs.states import ACTIVE_STATES
from scheduling.adapters.k8s.pods import LABEL_JOB, MANAGED_BY
from scheduling.adapters.k8s.training import headless_service_manifest
from scheduling.adapters.kubernetes_api import K8sOptions, logger, read_body


class ServiceWriter:
    def __init__(self, core: client.CoreV1Api, options: K8sOptions) -> None:
        self.core = core
        self.options = options

    def ensure(self, job: Job) -> bool:
        """Create a training job's headless Service (409 AlreadyExists is success); True if created."""
        body = headless_service_manifest(job_id=job.pk, namespace=job.team.namespace, labels={})
        try:
            self.options.call(
                lambda: read_body(
                    self.core.create_namespaced_service(
                        job.team.namespace, body, _preload_content=False, _request_timeout=self.options.request_timeout
                    )
                ),
                f"create service {job.team.namespace}/{body['metadata']['name']}",
            )
        except ApiException as exc:
            if exc.status != 409:
                logger.warning("kubernetes: job %s: cannot create its service: %s %s", job.pk, exc.status, exc.reason)
            return False
        return True

    def converge(self) -> dict[str, int]:
        """A Service for every active training job, none for any other job."""
        selector = f"{MANAGED_BY[0]}={MANAGED_BY[1]},{LABEL_JOB}"
        response = self.options.call(
            lambda: self.core.list_service_for_all_namespaces(
                label_selector=selector, _preload_content=False, _request_timeout=self.options.request_timeout
            ),
            "list services",
        )
        existing = {
            int(item["metadata"]["labels"][LABEL_JOB]): item["metadata"]
            for item in json.loads(response.data).get("items") or []
            if str(item["metadata"].get("labels", {}).get(LABEL_JOB, "")).isdigit()
        }
        active = list(Job.objects.select_related("team").filter(kind=Job.Kind.TRAINING, state__in=ACTIVE_STATES))
        made = sum(self.ensure(job) for job in active if job.pk not in existing)
        keep = {job.pk for job in active}
        removed = 0
        for job_id, meta in existing.items():
            if job_id not in keep:
                removed += self.delete(meta["namespace"], meta["name"])
        return {"services_created": made, "services_deleted": removed}

    def delete(self, namespace: str, name: str) -> int:
        """Delete one Service; 1 if it was there, 0 if gone (404) or refused (logged)."""
        try:
            self.options.call(
                lambda: read_body(
                    self.core.delete_namespaced_service(
                        name, namespace, _preload_content=False, _request_timeout=self.options.request_timeout
                    )
                ),
                f"delete service {namespace}/{name}",
            )
        except ApiException as exc:
            if exc.status != 404:
                logger.warning("kubernetes: cannot delete service %s/%s: %s", namespace, name, exc)
            return 0
        return 1
