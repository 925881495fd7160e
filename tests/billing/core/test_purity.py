"""The money core is pure: it imports only the standard library, the billed share and itself, and reads
no clock."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import billing.core
from tests.scheduling.engine.test_purity import imported_modules

CORE = sorted(Path(billing.core.__file__).parent.rglob("*.py"))
ALLOWED = {"scheduling.engine.shares"}
CLOCKS = {("time", "time"), ("time", "monotonic"), ("datetime", "now"), ("timezone", "now"), ("date", "today")}


def test_the_core_imports_only_stdlib_the_billed_share_and_itself():
    imports = {(path.name, module) for path in CORE for module in imported_modules(path)}
    assert {
        (name, module)
        for name, module in imports
        if module.split(".")[0] not in sys.stdlib_module_names
        and module not in ALLOWED
        and not module.startswith("billing.core")
    } == set()


def test_the_core_reads_no_clock():
    attributes = {
        (path.name, node.value.id, node.attr)
        for path in CORE
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
    }
    assert {(name, owner, attr) for name, owner, attr in attributes if (owner, attr) in CLOCKS} == set()
