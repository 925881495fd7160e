"""A distributed training job's pods: PyTorch's rendezvous variables and a headless Service. Pure.

The replicas of a ``training`` job are its workers ("nodes" in torchrun's words), one pod each,
``NPROC_PER_NODE`` processes per pod (the GPUs of a replica; 1 for a fraction, a MIG slice or no GPU).
Every pod gets the variables ``torchrun`` and ``torch.distributed`` read (``rendezvous_env``):

- ``MASTER_ADDR``: worker 0's stable DNS name, ``job-<id>-r0.job-<id>.<namespace>.svc``, which the
  headless Service ``job-<id>`` (``headless_service_manifest``) and the pods' ``hostname`` and
  ``subdomain`` give it; ``MASTER_PORT``: 29500, PyTorch's default;
- ``NNODES``: the workers; ``NODE_RANK``: this worker (0-based); ``NPROC_PER_NODE``: its processes;
- ``WORLD_SIZE``: every process of the job, ``NNODES × NPROC_PER_NODE``; ``RANK``: the global rank
  of this pod's first process, ``NODE_RANK × NPROC_PER_NODE`` (``torchrun`` sets each process's own).

The names do not contain the attempt: after a whole-gang restart the new pods answer to the same
names, so a job's launcher never changes.
"""

from __future__ import annotations

from scheduling.adapters.k8s.pods import LABEL_JOB, MANAGED_BY

MASTER_PORT = 29500
PORT_NAME = "rendezvous"


def service_name(job_id: int) -> str:
    return f"job-{job_id}"


def pod_hostname(job_id: int, replica: int) -> str:
    return f"job-{job_id}-r{replica}"


def master_addr(job_id: int, namespace: str) -> str:
    return f"{pod_hostname(job_id, 0)}.{service_name(job_id)}.{namespace}.svc"


def procs_per_node(*, gpu: int) -> int:
    """Processes per worker: one per whole GPU, else one."""
    return max(1, gpu)


def rendezvous_env(*, job_id: int, namespace: str, replica: int, replicas: int, procs: int) -> list[dict[str, str]]:
    """The variables of worker ``replica`` of ``replicas`` (see the module docstring)."""
    values = {
        "MASTER_ADDR": master_addr(job_id, namespace),
        "MASTER_PORT": str(MASTER_PORT),
        "NNODES": str(replicas),
        "NODE_RANK": str(replica),
        "NPROC_PER_NODE": str(procs),
        "WORLD_SIZE": str(replicas * procs),
        "RANK": str(replica * procs),
    }
    return [{"name": name, "value": value} for name, value in values.items()]


def pod_dns_fields(job_id: int, replica: int) -> dict[str, str]:
    """The pod spec fields that give a worker its stable name under the headless Service."""
    return {"hostname": pod_hostname(job_id, replica), "subdomain": service_name(job_id)}


def headless_service_manifest(*, job_id: int, namespace: str, labels: dict[str, str]) -> dict:
    """The Service that gives the workers DNS names. ``publishNotReadyAddresses``: workers must find
    each other before any of them is ready (the rendezvous is what makes them ready)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service_name(job_id),
            "namespace": namespace,
            "labels": {**labels, MANAGED_BY[0]: MANAGED_BY[1], LABEL_JOB: str(job_id)},
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {LABEL_JOB: str(job_id)},
            "ports": [{"name": PORT_NAME, "port": MASTER_PORT, "targetPort": MASTER_PORT, "protocol": "TCP"}],
        },
    }
