"""One family of modules talks to the ``kubernetes`` client; the translations it uses are pure."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CLIENT_FAMILY = [
    "scheduling/adapters/kubernetes.py",
    "scheduling/adapters/kubernetes_api.py",
    "scheduling/adapters/kubernetes_informer.py",
    "scheduling/adapters/kubernetes_namespaces.py",
    "scheduling/adapters/kubernetes_pods.py",
    "scheduling/adapters/kubernetes_ray.py",
    "scheduling/adapters/kubernetes_services.py",
]


def top_level_imports(path: Path) -> set[str]:
    """The top-level packages ``path`` imports absolutely, at module level or inside functions."""
    names = set()
    for stmt in ast.walk(ast.parse(path.read_text())):
        if isinstance(stmt, ast.Import):
            names |= {alias.name.split(".")[0] for alias in stmt.names}
        elif isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and stmt.module:
            names.add(stmt.module.split(".")[0])
    return names


def test_only_the_kubernetes_modules_of_the_adapters_import_the_client():
    importers = sorted(
        path.relative_to(ROOT).as_posix()
        for package in ("portal", "scheduling", "billing")
        for path in (ROOT / package).rglob("*.py")
        if "kubernetes" in top_level_imports(path)
    )
    assert importers == CLIENT_FAMILY


def test_the_translations_import_neither_the_client_nor_django():
    offenders = {
        path.name: sorted(top_level_imports(path) & {"kubernetes", "urllib3", "django"})
        for path in sorted((ROOT / "scheduling/adapters/k8s").glob("*.py"))
    }
    assert offenders == {name: [] for name in offenders}
    assert "nodes.py" in offenders
