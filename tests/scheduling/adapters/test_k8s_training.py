"""A training worker's environment and Service, checked against PyTorch's definitions written out here."""

from __future__ import annotations

import pytest

from scheduling.adapters.k8s.manifests import PodJob, pod_manifest
from scheduling.adapters.k8s.training import headless_service_manifest, procs_per_node, rendezvous_env
from scheduling.engine.model import ReplicaPlacement


def env_of(manifest: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in manifest["spec"]["containers"][0]["env"]}


@pytest.mark.parametrize(("workers", "gpus"), [(1, 1), (2, 8), (3, 4), (16, 8)])
def test_every_worker_gets_torchruns_rendezvous_variables(workers, gpus):
    for worker in range(workers):
        env = {e["name"]: e["value"] for e in rendezvous_env(
            job_id=42, namespace="team-a", replica=worker, replicas=workers, procs=gpus
        )}  # fmt: skip
        # torch.distributed: WORLD_SIZE counts every process; a worker's first process has global
        # rank node_rank * nproc_per_node; worker 0 is the master, reached through the Service.
        assert env == {
            "MASTER_ADDR": "job-42-r0.job-42.team-a.svc",
            "MASTER_PORT": "29500",
            "NNODES": str(workers),
            "NODE_RANK": str(worker),
            "NPROC_PER_NODE": str(gpus),
            "WORLD_SIZE": str(workers * gpus),
            "RANK": str(worker * gpus),
        }


def test_a_worker_without_whole_gpus_runs_one_process():
    assert [procs_per_node(gpu=g) for g in (0, 1, 8)] == [1, 1, 8]


def pod_job(**overrides) -> PodJob:
    values: dict = {"job_id": 7, "attempt": 2, "namespace": "team-vision", "team": "vision", "queue": "default"}
    values |= {"image": "img:1", "command": ("torchrun", "train.py"), "replicas": 2, "cpu_milli": 1000}
    return PodJob(**{**values, "memory_mib": 1024, **overrides})


def test_a_training_pod_has_a_stable_name_under_the_service_and_the_rank_of_its_replica():
    job = pod_job(kind="training", procs_per_node=4, checkpoint_path="s3://ckpt/run-1")
    placement = ReplicaPlacement(node="n1", gpu_indices=(0, 1, 2, 3), gpu_milli=1000)
    manifest = pod_manifest(job, 1, placement, scheduler_name="gpu-portal", run_as_user=1000)
    assert (manifest["spec"]["hostname"], manifest["spec"]["subdomain"]) == ("job-7-r1", "job-7")
    env = env_of(manifest)
    assert (env["NODE_RANK"], env["RANK"], env["WORLD_SIZE"]) == ("1", "4", "8")
    assert env["CHECKPOINT_PATH"] == "s3://ckpt/run-1"


def test_a_batch_pod_gets_neither_rendezvous_variables_nor_a_hostname():
    manifest = pod_manifest(pod_job(), 0, ReplicaPlacement(node="n1"), scheduler_name="s", run_as_user=1000)
    assert "hostname" not in manifest["spec"]
    assert not {"MASTER_ADDR", "RANK", "WORLD_SIZE", "CHECKPOINT_PATH"} & set(env_of(manifest))


def test_the_service_is_headless_and_selects_the_jobs_pods_of_every_attempt():
    service = headless_service_manifest(job_id=7, namespace="team-vision", labels={})
    assert service["metadata"]["name"] == "job-7"
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == {"gpu-portal.io/job-id": "7"}
    assert service["spec"]["ports"][0]["port"] == 29500
