"""The engine is pure: it imports only the standard library, numpy and itself."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import scheduling.engine

ENGINE = Path(scheduling.engine.__file__).parent
ALLOWED_THIRD_PARTY = {"numpy"}
FORBIDDEN_CALLS = {("time", "time"), ("time", "monotonic"), ("datetime", "now"), ("random", "random")}


def imported_modules(path: Path) -> set[str]:
    """Absolute names of the modules ``path`` imports (relative imports stay inside the package)."""
    modules = set()
    for stmt in ast.walk(ast.parse(path.read_text())):
        if isinstance(stmt, ast.Import):
            modules |= {alias.name for alias in stmt.names}
        elif isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and stmt.module:
            modules.add(stmt.module)
    return modules


def test_engine_imports_only_stdlib_numpy_and_itself():
    offenders = {}
    for path in sorted(ENGINE.rglob("*.py")):
        bad = {
            module
            for module in imported_modules(path)
            if module.split(".")[0] not in sys.stdlib_module_names
            and module.split(".")[0] not in ALLOWED_THIRD_PARTY
            and module != "scheduling.engine"
            and not module.startswith("scheduling.engine.")
        }
        if bad:
            offenders[path.name] = sorted(bad)
    assert offenders == {}


def test_engine_reads_no_clock_and_no_unseeded_randomness():
    for path in sorted(ENGINE.rglob("*.py")):
        for stmt in ast.walk(ast.parse(path.read_text())):
            if isinstance(stmt, ast.Attribute) and isinstance(stmt.value, ast.Name):
                assert (stmt.value.id, stmt.attr) not in FORBIDDEN_CALLS, f"{path.name}: {stmt.value.id}.{stmt.attr}"
