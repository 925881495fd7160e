"""The layer rules of docs/architecture.md, checked on every import the project's own modules make.

Imports are read from the source (``ast``), at module level *and* inside functions, so a lazy import
cannot hide a circle. Layers, from the top:

    pages, api, views, admin, management commands, tasks     (entry points)
    services                                                  (writes)
    selectors, adapters                                       (reads, the cluster)
    models, states, transitions                               (rows and the state machine's write)
    scheduling.engine                                         (pure: stdlib and numpy only)

The one sanctioned back-edge is Celery's convention: a ``tasks`` module imports its services inside
the task function, while services enqueue through the ``*_task`` they import at module level.
"""

from __future__ import annotations

import ast
import fnmatch
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("portal", "scheduling", "billing")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" not in path.parts:
                modules[module_name(path)] = path
    return modules


MODULES = project_modules()


def resolve(name: str) -> str | None:
    """The project module an import names (``a.b.c`` may be module ``a.b`` importing name ``c``)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(module: str) -> list[tuple[str, bool]]:
    """``(imported project module, inside a function)`` for every import statement of ``module``."""
    path = MODULES[module]
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, local: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = local or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.Import):
                targets = (resolve(alias.name) for alias in child.names)
                found.extend((target, local) for target in targets if target)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = (resolve(f"{base}.{alias.name}") or resolve(base) for alias in child.names)
                found.extend((target, local) for target in targets if target)
            visit(child, inner)

    visit(tree, False)
    return [(target, local) for target, local in found if target != module]


def is_tasks(module: str) -> bool:
    return module.rpartition(".")[2] == "tasks"


def is_services(module: str) -> bool:
    return module.rpartition(".")[2] == "services" or ".services." in module


def graph(*, sanctioned: bool = False) -> dict[str, set[str]]:
    """Import edges; with ``sanctioned`` false, a task's function-local import of a service is left out."""
    edges: dict[str, set[str]] = defaultdict(set)
    for module in MODULES:
        for target, local in imports_of(module):
            if not sanctioned and is_tasks(module) and local and is_services(target):
                continue
            edges[module].add(target)
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def connect(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(set(MODULES) | set(edges)):
        if v not in index:
            connect(v)
    return found


# (fnmatch pattern, layer), first match wins. A new module that matches none fails
# test_every_module_has_a_layer: decide where it belongs and add it here and to docs/architecture.md.
LAYERS: tuple[tuple[str, int], ...] = (
    # 0: pure libraries, no Django and no I/O of the portal's own (the simulator reads trace files)
    ("scheduling.engine", 0),
    ("scheduling.engine.*", 0),
    ("scheduling.sim", 0),
    ("scheduling.sim.*", 0),
    ("billing.core", 0),
    ("billing.core.*", 0),
    ("billing.charts", 0),
    ("portal.pages.charts", 0),
    ("portal.chart_layout", 0),
    ("portal.whatif.charts", 0),
    ("portal.tenants.tolerations", 0),
    ("portal.jobs.images", 0),
    ("portal.notifications.signing", 0),
    ("portal.schedules.cron", 0),
    ("portal.serving.sizing", 0),
    ("portal.serving.load", 2),
    # 1: rows, the state table and its one write, settings helpers
    ("*.models", 1),
    ("portal.jobs.states", 1),
    ("portal.jobs.transitions", 1),
    ("portal.jobs.errors", 1),
    ("portal.env", 1),
    ("portal.prepared", 1),
    ("billing.records", 1),
    ("*.apps", 1),
    # 2: reads and the outside world
    ("scheduling.adapters", 2),
    ("scheduling.adapters.*", 2),
    ("*.selectors", 2),
    ("billing.selectors.*", 2),
    ("portal.ops.selectors.*", 2),
    ("billing.sql", 2),
    ("scheduling.invariants", 2),
    ("scheduling.dry_run", 2),
    ("portal.jobs.spec", 2),
    ("billing.utilization", 2),
    # 3: writes
    ("*.services", 3),
    ("billing.services.*", 3),
    ("portal.notifications.services.*", 3),
    # 4: entry points
    ("*.tasks", 4),
    ("*.api", 4),
    ("*.api.*", 4),
    ("*.views", 4),
    ("*.urls", 4),
    ("*.admin", 4),
    ("*.context", 4),
    ("*.management", 4),
    ("*.management.*", 4),
    ("portal.pages.*", 4),
    ("scheduling.metrics", 4),
    ("portal.settings", 4),
    ("portal.wsgi", 4),
    ("portal.middleware", 4),
    ("portal.celery", 4),
    ("portal", 4),
    ("portal.*", 4),
    ("billing", 4),
    ("scheduling", 4),
)


def layer(module: str) -> int:
    """0 pure libraries, 1 models, 2 selectors/adapters, 3 services, 4 entry points."""
    for pattern, number in LAYERS:
        if fnmatch.fnmatchcase(module, pattern):
            return number
    raise KeyError(module)


def test_every_module_has_a_layer():
    unplaced = []
    for module in MODULES:
        try:
            layer(module)
        except KeyError:
            unplaced.append(module)
    assert unplaced == []


def test_no_import_circle_among_the_projects_modules_not_even_through_function_local_imports():
    assert circles(graph()) == []


def test_the_circle_finder_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_import_reader_sees_function_local_and_relative_imports():
    local = {target for target, is_local in imports_of("scheduling.tasks") if is_local}
    assert "scheduling.services" in local
    assert "scheduling.engine.model" in {target for target, _ in imports_of("scheduling.engine.cycle")}


@pytest.mark.parametrize(
    ("rule", "forbidden"),
    [
        ("adapters never import services, tasks or entry points", ("scheduling.adapters", (3, 4))),
        ("selectors never import services or entry points", ("selectors", (3, 4))),
        ("models import only models and the pure libraries", ("models", (2, 3, 4))),
        ("the pure libraries import only each other", ("scheduling.engine", (1, 2, 3, 4))),
        ("the simulator imports only the pure libraries", ("scheduling.sim", (1, 2, 3, 4))),
    ],
)
def test_layer_rule(rule, forbidden):
    prefix, layers = forbidden
    offenders = sorted(
        (module, target)
        for module, targets in graph(sanctioned=True).items()
        if (module.startswith(prefix) or module.rpartition(".")[2] == prefix or f".{prefix}." in module)
        for target in targets
        if layer(target) in layers
    )
    assert offenders == [], rule


def test_no_lower_layer_imports_a_higher_one():
    offenders = sorted(
        (module, target)
        for module, targets in graph().items()
        for target in targets
        if layer(target) > layer(module) and not (layer(module) == 3 and is_tasks(target))
    )
    assert offenders == []


def test_scheduling_never_imports_billing():
    offenders = sorted(
        (module, target)
        for module, targets in graph(sanctioned=True).items()
        if module.startswith("scheduling")
        for target in targets
        if target.startswith("billing")
    )
    assert offenders == []


def test_the_backend_contract_imports_no_backend():
    targets = {target for target, _ in imports_of("scheduling.adapters.contract")}
    assert not targets & {"scheduling.adapters.simulated", "scheduling.adapters.kubernetes"}
