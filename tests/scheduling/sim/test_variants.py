"""Workload variants keep the pod count and hit the requested mix, deterministically."""

from __future__ import annotations

import pytest

from scheduling.sim import variants
from tests.scheduling.sim.conftest import make_nodes, make_pods


def share_of_gpu_pods(pods, predicate) -> float:
    gpu = [p for p in pods if p.gpu_count > 0]
    return sum(1 for p in gpu if predicate(p)) / len(gpu)


def test_gpushare_and_multigpu_set_the_share_of_gpu_pods():
    pods = make_pods(400, seed=2)
    more_share = variants.make("gpushare80", pods, make_nodes(), seed=1)
    assert len(more_share) == len(pods)
    assert share_of_gpu_pods(more_share, lambda p: p.gpu_milli < 1000) == pytest.approx(0.8, abs=0.01)
    more_multi = variants.make("multigpu30", pods, make_nodes(), seed=1)
    assert share_of_gpu_pods(more_multi, lambda p: p.gpu_count > 1) == pytest.approx(0.3, abs=0.01)
    assert len({p.name for p in more_multi}) == len(more_multi)


def test_gpuspec_restricts_a_third_of_gpu_pods_to_models_that_can_host_them():
    nodes = make_nodes(12, seed=4)
    pods = make_pods(300, seed=4, spec_share=0.0)
    out = variants.make("gpuspec33", pods, nodes, seed=3)
    assert share_of_gpu_pods(out, lambda p: bool(p.allowed_models)) == pytest.approx(0.33, abs=0.01)
    most = {}
    for n in nodes:
        most[n.gpu_model] = max(most.get(n.gpu_model, 0), n.gpu_count)
    for p in out:
        assert all(most[m] >= p.gpu_count for m in p.allowed_models)
    assert [p.name for p in out] == [p.name for p in variants.make("gpuspec33", pods, nodes, seed=3)]


def test_cpuonly_scales_the_cpu_only_pods_and_keeps_gpu_pods():
    pods = make_pods(200, seed=5)
    out = variants.make("cpuonly200", pods, make_nodes(), seed=0)
    cpu_before = sum(1 for p in pods if p.gpu_count == 0)
    assert sum(1 for p in out if p.gpu_count == 0) == 2 * cpu_before
    assert sum(1 for p in out if p.gpu_count > 0) == len(pods) - cpu_before
