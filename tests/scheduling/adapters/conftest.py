"""Fixtures: a fake Kubernetes API server on 127.0.0.1 and the real client configured to speak to it."""

from __future__ import annotations

import pytest
from django.test import TestCase
from django.utils import timezone
from kubernetes import client

from portal.jobs.models import Job
from scheduling.adapters.k8s.pods import LABEL_JOB
from scheduling.adapters.kubernetes import KubernetesBackend
from scheduling.adapters.kubernetes_api import K8sOptions
from scheduling.services import cycle_run
from tests.factories import build_world
from tests.scheduling.adapters.fakeapi import FakeKubeApi

FAST = K8sOptions(timeout_s=2.0, watch_timeout_s=2, sync_timeout_s=3.0, retries=3, backoff_s=0.01, grace_s=5)


@pytest.fixture
def kube():
    api = FakeKubeApi().start()
    yield api
    api.stop()


def backend_for(api: FakeKubeApi, options: K8sOptions = FAST) -> KubernetesBackend:
    configuration = client.Configuration()
    configuration.host = api.url
    configuration.retries = False
    return KubernetesBackend(api_client=client.ApiClient(configuration), options=options)


@pytest.fixture
def backend(kube):
    b = backend_for(kube)
    yield b
    b.close()


@pytest.fixture
def kworld(db):
    return build_world(a100_nodes=0, t4_nodes=0, nominal_a100=16)


def settle(backend: KubernetesBackend, api: FakeKubeApi, timeout_s: float = 5.0) -> None:
    """Wait until the backend's caches have every change the fake server made (they are eventually
    consistent by design; tests want a deterministic point to assert at)."""
    import time

    backend.sync()
    deadline = time.monotonic() + timeout_s
    for informer, kind in ((backend.node_informer, "Node"), (backend.pod_informer, "Pod")):
        while int(informer.resource_version or 0) < api.latest_rv(kind):
            assert time.monotonic() < deadline, f"{kind} cache stuck at {informer.resource_version}"
            time.sleep(0.01)


def cycle(backend, kube, now=None):
    """One cycle with the on-commit pod creation run (the test's transaction never commits)."""
    settle(backend, kube)
    with TestCase.captureOnCommitCallbacks(execute=True):
        run = cycle_run(now=now or timezone.now(), backend=backend)
    settle(backend, kube)
    return run


def pods_of(kube, job: Job) -> list[dict]:
    return sorted(
        (p for p in kube.pods.values() if p["metadata"]["labels"].get(LABEL_JOB) == str(job.pk)),
        key=lambda p: p["metadata"]["name"],
    )
