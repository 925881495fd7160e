"""Team namespaces kept in step on Kubernetes: read each namespace's ResourceQuota and LimitRange,
compare them with the portal's (``k8s.namespaces``), create what is missing and replace what drifted.

Steps of ``namespaces_sync`` for each namespace, each object:

1. GET it by name (404: absent).
2. Compare by value (``quota_drift`` / ``limit_range_drift``).
3. Absent: POST it (409 AlreadyExists, a racing writer: read again next pass). Drifted: PUT the wanted
   object with the live one's resourceVersion (409 Conflict, a concurrent edit: next pass).
4. Report what was found and done; an API error on one namespace is reported and the others go on.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from scheduling.adapters.k8s.namespaces import (
    LIMIT_RANGE,
    LIMITS_NAME,
    QUOTA_NAME,
    RESOURCE_QUOTA,
    NamespaceObjects,
    ObjectReport,
    limit_range_drift,
    limit_range_manifest,
    quota_drift,
    resource_quota_manifest,
)
from scheduling.adapters.kubernetes_api import ClusterApiError, K8sOptions, call, read_body


class NamespaceWriter:
    def __init__(self, core: client.CoreV1Api, options: K8sOptions) -> None:
        self.core = core
        self.options = options

    def _call(self, fn: Callable[[], Any], what: str) -> Any:
        return call(fn, retries=self.options.retries, backoff_s=self.options.backoff_s, what=what)

    @property
    def _timeout(self) -> tuple[float, float]:
        return (self.options.timeout_s, self.options.timeout_s)

    def _kind_calls(self, kind: str) -> tuple[Callable, Callable, Callable]:
        core = self.core
        if kind == RESOURCE_QUOTA:
            return (
                core.read_namespaced_resource_quota,
                core.create_namespaced_resource_quota,
                core.replace_namespaced_resource_quota,
            )
        return core.read_namespaced_limit_range, core.create_namespaced_limit_range, core.replace_namespaced_limit_range

    def sync(self, wanted: list[NamespaceObjects]) -> list[ObjectReport]:
        reports = []
        for objects in wanted:
            for kind, name, manifest, drift_of in (
                (RESOURCE_QUOTA, QUOTA_NAME, resource_quota_manifest(objects), quota_drift),
                (LIMIT_RANGE, LIMITS_NAME, limit_range_manifest(objects), limit_range_drift),
            ):
                reports.append(self._one(objects, kind, name, manifest, drift_of))
        return reports

    def _one(self, objects: NamespaceObjects, kind: str, name: str, manifest: dict, drift_of) -> ObjectReport:
        namespace = objects.namespace
        read, create, replace = self._kind_calls(kind)
        where = f"{kind} {namespace}/{name}"
        try:
            # 1. Read it.
            try:
                response = self._call(
                    lambda: read(name, namespace, _preload_content=False, _request_timeout=self._timeout),
                    f"read {where}",
                )
                live: dict | None = json.loads(response.data)
            except ApiException as exc:
                if exc.status != 404:
                    raise
                live = None
            # 2. Compare.
            drift = tuple(drift_of(live, objects))
            if not drift:
                return ObjectReport(namespace, kind, name, (), "none")
            # 3. Repair.
            if live is None:
                try:
                    self._call(
                        lambda: read_body(
                            create(namespace, manifest, _preload_content=False, _request_timeout=self._timeout)
                        ),
                        f"create {where}",
                    )
                except ApiException as exc:
                    if exc.status != 409:
                        raise
                    return ObjectReport(namespace, kind, name, drift, "failed: created concurrently; next pass")
                return ObjectReport(namespace, kind, name, drift, "created")
            body = {**manifest, "metadata": {**manifest["metadata"], "resourceVersion": _version(live)}}
            try:
                self._call(
                    lambda: read_body(
                        replace(name, namespace, body, _preload_content=False, _request_timeout=self._timeout)
                    ),
                    f"replace {where}",
                )
            except ApiException as exc:
                if exc.status != 409:
                    raise
                return ObjectReport(namespace, kind, name, drift, "failed: changed concurrently; next pass")
            return ObjectReport(namespace, kind, name, drift, "replaced")
        except (ApiException, ClusterApiError) as exc:  # 4. one namespace's error does not stop the rest
            why = f"HTTP {exc.status} {exc.reason}" if isinstance(exc, ApiException) else str(exc)
            return ObjectReport(namespace, kind, name, ("unknown: the API did not answer",), f"failed: {why}"[:300])


def _version(live: dict) -> str:
    return str((live.get("metadata") or {}).get("resourceVersion") or "")
