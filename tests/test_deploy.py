"""deploy/: every pod the manifests run meets the restricted profile; RBAC grants only what is used."""

from __future__ import annotations

from pathlib import Path

import yaml

from scheduling.adapters.pod_security import pod_spec_violations
from scheduling.management.commands.cluster_check import REQUIRED_ACCESS

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"


def documents() -> list[dict]:
    paths = [p for p in sorted(DEPLOY.glob("*.yaml")) if p.name != "kustomization.yaml"]
    return [doc for path in paths for doc in yaml.safe_load_all(path.read_text()) if doc]


def test_the_manifests_run_web_worker_and_beat_with_a_service():
    names = {(d["kind"], d["metadata"]["name"]) for d in documents()}
    for expected in (
        ("Deployment", "gpu-portal-web"),
        ("Deployment", "gpu-portal-worker"),
        ("Deployment", "gpu-portal-beat"),
        ("Service", "gpu-portal"),
        ("ServiceAccount", "gpu-portal"),
        ("Secret", "gpu-portal"),
    ):
        assert expected in names


def test_every_workload_meets_the_restricted_pod_security_standard():
    for doc in documents():
        if doc["kind"] in ("Deployment", "Job"):
            spec = doc["spec"]["template"]["spec"]
            assert pod_spec_violations(spec) == [], doc["metadata"]["name"]


def test_rbac_grants_exactly_what_the_portal_uses():
    rules = [
        ([f"{r}.{group}" if group else r for r in rule["resources"]], rule["verbs"])
        for doc in documents()
        if doc["kind"] == "ClusterRole"
        for rule in doc["rules"]
        for group in rule["apiGroups"]
        if group in ("", "ray.io")
    ]
    for resources, verbs in rules:
        assert "*" not in resources
        assert "*" not in verbs
        assert "secrets" not in resources
    granted = {(verb, resource) for resources, verbs in rules for resource in resources for verb in verbs}
    for verb, resource, subresource, _ in REQUIRED_ACCESS:
        assert (verb, f"{resource}/{subresource}" if subresource else resource) in granted
    beat = next(d for d in documents() if d["metadata"]["name"] == "gpu-portal-beat")
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"]["type"] == "Recreate"
