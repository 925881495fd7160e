"""The engine is pure: it imports only the standard library, numpy and itself."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import scheduling.engine

ENGINE = Path(scheduling.engine.__file__).parent
ALLOWED_THIRD_PARTY = {"numpy"}
FORBIDDEN_CALLS = {("time", "time"), ("time", "monotonic"), ("datetime", "now"), ("random", "random")}


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for stmt in ast.walk(ast.parse(path.read_text())):
        if isinstance(stmt, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in stmt.names}
        elif isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and stmt.module:
            roots.add(stmt.module.split(".")[0])
    return roots


def test_engine_imports_only_stdlib_numpy_and_itself():
    offenders = {}
    for path in sorted(ENGINE.glob("*.py")):
        bad = {
            root
            for root in imported_roots(path)
            if root not in sys.stdlib_module_names and root not in ALLOWED_THIRD_PARTY and root != "scheduling"
        }
        absolute_engine_only = all(
            not isinstance(s, ast.ImportFrom)
            or s.level > 0
            or not (s.module or "").startswith("scheduling")
            or (s.module or "").startswith("scheduling.engine")
            for s in ast.walk(ast.parse(path.read_text()))
        )
        if bad or not absolute_engine_only:
            offenders[path.name] = sorted(bad) or ["scheduling outside the engine"]
    assert offenders == {}


def test_engine_reads_no_clock_and_no_unseeded_randomness():
    for path in sorted(ENGINE.glob("*.py")):
        for stmt in ast.walk(ast.parse(path.read_text())):
            if isinstance(stmt, ast.Attribute) and isinstance(stmt.value, ast.Name):
                assert (stmt.value.id, stmt.attr) not in FORBIDDEN_CALLS, f"{path.name}: {stmt.value.id}.{stmt.attr}"
