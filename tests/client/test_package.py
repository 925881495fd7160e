"""``client/`` is a package of its own: it builds into a wheel (typed: ``py.typed``; the ``gpuportal``
command), installs without the portal, and imports nothing of the server."""

from __future__ import annotations

import ast
import email
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from gpuportal import __version__

CLIENT = Path(__file__).resolve().parents[2] / "client"
ALLOWED = {"gpuportal", "requests", "urllib3", "yaml", "tqdm"}  # and the standard library


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel ``pip install ./client`` builds (from a copy: an in-tree build leaves files behind)."""
    work = tmp_path_factory.mktemp("client-build")
    source = work / "client"
    shutil.copytree(CLIENT, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]
    subprocess.run([*pip_wheel, str(source), "-w", str(work)], check=True, capture_output=True, timeout=300)
    [built] = work.glob("gpuportal-*.whl")
    return built


def test_the_wheel_is_typed_declares_its_dependencies_and_the_gpuportal_command(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = email.message_from_string(archive.read(info).decode())
        entry_points = archive.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "gpuportal/py.typed" in names
    assert {"gpuportal/client.py", "gpuportal/cli.py", "gpuportal/types.py"} <= names
    assert not any(name.startswith(("portal/", "billing/", "scheduling/", "tests/")) for name in names)
    assert metadata["Name"] == "gpuportal"
    assert metadata["Version"] == __version__
    requires = {r.split(">")[0].split("=")[0].strip().lower() for r in metadata.get_all("Requires-Dist")}
    assert {"requests", "pyyaml", "tqdm"} <= requires
    assert "gpuportal = gpuportal.cli:main" in entry_points


def test_installed_from_the_wheel_the_command_runs_without_the_portals_code(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target), str(wheel)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    # Only the installed copy and the dependencies on the path: not the repository, not Django.
    env = {"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    version = subprocess.run(
        [str(target / "bin" / "gpuportal"), "--version"], env=env, capture_output=True, text=True, timeout=60
    )
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"gpuportal {__version__}"
    usage = subprocess.run(
        [sys.executable, "-m", "gpuportal", "jobs"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert usage.returncode == 2  # no URL configured: a usage error, not a traceback
    assert "no portal URL" in usage.stderr
    imported = subprocess.run(
        [sys.executable, "-c", "import gpuportal, sys; print(gpuportal.__file__, 'django' in sys.modules)"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    path, django_loaded = imported.stdout.split()
    assert Path(path).is_relative_to(target)
    assert django_loaded == "False"


def test_the_client_imports_only_the_standard_library_requests_pyyaml_and_tqdm():
    foreign = {}
    for path in sorted((CLIENT / "gpuportal").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if top not in ALLOWED and top not in sys.stdlib_module_names and top != "__future__":
                    foreign.setdefault(str(path.relative_to(CLIENT)), []).append(name)
    assert foreign == {}
