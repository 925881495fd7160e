"""Calls to the API: retried with backoff on 5xx and client timeouts, once with retries off; the kubeconfig."""

from __future__ import annotations

import json
import time

import pytest
from kubernetes.client.exceptions import ApiException

from scheduling.adapters.kubernetes import KubernetesBackend
from scheduling.adapters.kubernetes_api import ClusterApiError, call
from tests.scheduling.adapters.conftest import cycle, pods_of, settle


def test_5xx_answers_are_retried_with_backoff(kworld, kube, backend):
    kube.add_node("a100-0", gpus=8)
    kube.fail("POST", r"/pods$", status=503, times=2)
    kube.fail("POST", r"/binding$", status=500, times=1)
    job = kworld.submit(gpu=1)
    cycle(backend, kube)
    (pod,) = pods_of(kube, job)
    assert pod["spec"]["nodeName"] == "a100-0"


def test_a_call_that_hangs_times_out_on_the_client_and_is_retried(kworld, kube, backend):
    kube.add_node("a100-0", gpus=8)
    kube.fail("POST", r"/pods$", status=0, delay_s=backend.options.timeout_s + 1, times=1)
    job = kworld.submit(gpu=1)
    settle(backend, kube)
    started = time.monotonic()
    cycle(backend, kube)
    assert time.monotonic() - started < 3 * backend.options.timeout_s + 5
    assert len(pods_of(kube, job)) == 1  # the stalled create did land; the retry got 409


def test_kubeconfig_selects_the_cluster(kworld, kube, settings, tmp_path):
    from scheduling.adapters.factory import cluster_backend

    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(json.loads(kube.kubeconfig())))
    settings.CLUSTER_BACKEND = "kubernetes"
    settings.KUBECONFIG = str(path)
    KubernetesBackend._instances = {}
    kube.add_node("a100-0", gpus=8)
    try:
        backend = cluster_backend()
        assert isinstance(backend, KubernetesBackend)
        assert [n.name for n in backend.nodes()] == ["a100-0"]
        assert cluster_backend() is backend  # one set of informers per process
        assert ("GET", "/api/v1/nodes") in [(m, p.split("?")[0]) for m, p in kube.requests]
    finally:
        backend.close()
        KubernetesBackend._instances = {}


@pytest.mark.parametrize("retries", [0, 1])
def test_with_retries_off_a_call_is_made_once_and_a_failure_is_a_cluster_error(retries):
    calls = []

    def fails():
        calls.append(1)
        raise ApiException(status=503)

    assert call(lambda: "ok", retries=retries, backoff_s=0, what="get") == "ok"
    with pytest.raises(ClusterApiError):
        call(fails, retries=retries, backoff_s=0, what="get")
    assert len(calls) == 1
