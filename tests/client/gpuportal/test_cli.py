"""The ``gpuportal`` command against a live portal: specs from YAML and flags, ``--json``, URL and token
from flags, environment or config file, and the documented exit codes (``gpuportal.cli.Exit``)."""

from __future__ import annotations

import fcntl
import io
import json
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from gpuportal import Portal
from gpuportal.cli import Exit, main
from gpuportal.render import usd
from portal.jobs.models import GpuModel
from portal.jobs.models import Job as JobRow
from portal.jobs.states import JobState
from scheduling.adapters.simulated import SimulatedCluster
from scheduling.services import cycle_run
from tests.client.conftest import needs_dry_run

pytestmark = pytest.mark.django_db(transaction=True)
CLIENT = Path(__file__).resolve().parents[3] / "client"

JOB_YAML = """\
name: resnet
queue: default
image: nvcr.io/nvidia/pytorch:24.08-py3
command: python train.py --epochs 1
gpu: 2
runtime: 1m
allowed_gpu_models: [A100-80GB]
labels: {project: atlas}
"""


class Run:
    """One CLI invocation: exit code, stdout, stderr."""

    def __init__(self, *argv: str) -> None:
        out, err = io.StringIO(), io.StringIO()
        self.code = main(list(argv), out=out, err=err)
        self.out, self.err = out.getvalue(), err.getvalue()

    def json(self):
        return json.loads(self.out)


@pytest.fixture
def connect(portal_url, key_of) -> list[str]:
    return ["--url", portal_url, "--token", key_of("alice")]


@pytest.fixture
def job_yaml(tmp_path) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(JOB_YAML)
    return str(path)


def test_submit_from_yaml_waits_to_succeeded_and_exits_0_then_status_and_cost_print_json(connect, job_yaml, cluster):
    submitted = Run("submit", job_yaml, "--wait", "--no-progress", "--poll", "0.1", "--timeout", "1m", *connect)
    assert submitted.code == Exit.OK, submitted.err
    assert "Succeeded" in submitted.out
    job_id = JobRow.objects.get().pk
    assert f"submitted job {job_id}" in submitted.err
    # A line per change, no bar in a pipe: each state the polls saw once, the last one Succeeded (on a
    # loaded machine the one-second job can end before the first poll, so earlier states may be unseen).
    states = [line.rsplit(": ", 1)[-1] for line in submitted.err.splitlines() if line.startswith(f"job {job_id} ")]
    assert states[-1:] == ["Succeeded"], submitted.err
    assert len(states) == len(set(states)), submitted.err
    assert "\r" not in submitted.err

    status = Run("status", str(job_id), "--json", *connect)
    assert status.code == Exit.OK
    assert status.json()["state"] == "Succeeded"
    assert status.json()["labels"] == {"project": "atlas"}
    assert status.json()["runtime_s"] == 60

    cost = Run("cost", str(job_id), "--json", *connect)
    assert cost.code == Exit.OK
    portal = Portal(connect[1], connect[3])
    expected = dict(portal.cost(job_id).raw)  # the portal's own answer (checked in test_client)
    assert {k: v for k, v in cost.json().items() if k != "as_of"} == {k: v for k, v in expected.items() if k != "as_of"}
    text = Run("cost", str(job_id), *connect)
    assert f"job {job_id}: " in text.out
    assert "GPU-hours" in text.out
    assert f"= {usd(Decimal(expected['total_usd']))} USD" in text.out


def test_flags_override_the_file_and_the_command_after_a_double_dash_is_the_argv(connect, job_yaml):
    run = Run(
        "submit", job_yaml, "--gpu", "1", "--name", "eval", "--label", "stage=eval", "--runtime", "1h30m",
        "--json", *connect, "--", "python", "eval.py", "--split", "test set",
    )  # fmt: skip
    assert run.code == Exit.OK, run.err
    body = run.json()
    stored = JobRow.objects.get(pk=body["id"])
    assert (stored.name, stored.gpu, stored.runtime_s) == ("eval", 1, 5400)
    assert stored.command == ["python", "eval.py", "--split", "test set"]
    assert stored.labels == {"project": "atlas", "stage": "eval"}
    assert body["command"] == stored.command


def test_a_refused_spec_exits_2_naming_the_field_and_4_when_it_never_fits(connect, job_yaml):
    run = Run("submit", job_yaml, "--gpu-milli", "250", *connect)
    assert run.code == Exit.USAGE
    assert "gpu_milli: set only one of" in run.err
    assert JobRow.objects.count() == 0
    as_json = Run("submit", job_yaml, "--gpu-milli", "250", "--json", *connect)
    assert as_json.json()["errors"]["gpu_milli"]
    never = Run("submit", job_yaml, "--gpu", "16", *connect)  # the largest A100 node has 8
    assert never.code == Exit.NEVER
    assert "never fits as configured" in never.err
    assert JobRow.objects.count() == 0


@pytest.mark.django_db(transaction=False)
def test_usage_mistakes_exit_2_before_anything_is_sent(tmp_path):
    nowhere = ["--url", "http://127.0.0.1:9", "--token", "gpt_unused"]  # a request would fail with exit 1
    assert Run().code == Exit.USAGE  # no command
    assert Run("submit", "--gpu", "two", *nowhere).code == Exit.USAGE
    missing = Run("submit", str(tmp_path / "nope.yaml"), *nowhere)
    assert missing.code == Exit.USAGE
    assert "cannot read" in missing.err
    listed = tmp_path / "list.yaml"
    listed.write_text("- queue: default\n")
    assert "must hold a mapping" in Run("check", str(listed), *nowhere).err
    assert Run("submit", "--runtime", "soon", "--queue", "default", *nowhere).code == Exit.USAGE
    assert Run("status", "forty-two", *nowhere).code == Exit.USAGE
    assert Run("status", "1", "--", "x", *nowhere).code == Exit.USAGE
    assert Run("jobs", "--url", "ftp://x", "--token", "t").code == Exit.USAGE


def test_portal_errors_exit_1(portal_url, connect, world):
    bobs = world.submit("nlp", name="bobs")
    hidden = Run("status", str(bobs.pk), *connect)
    assert hidden.code == Exit.ERROR
    assert "404" in hidden.err
    bad_token = Run("jobs", "--url", portal_url, "--token", "gpt_wrong")
    assert bad_token.code == Exit.ERROR
    assert "401" in bad_token.err
    JobRow.objects.filter(pk=bobs.pk).update(state=JobState.SUCCEEDED)
    bob = Run("cancel", str(bobs.pk), "--url", portal_url, "--token", connect[3])
    assert bob.code == Exit.ERROR


def test_wait_exits_5_for_a_cancelled_job_and_6_when_its_timeout_passes(connect, job_yaml):
    job_id = Run("submit", job_yaml, "--json", *connect).json()["id"]
    timed_out = Run("wait", str(job_id), "--timeout", "1s", "--poll", "0.2", "--no-progress", *connect)
    assert timed_out.code == Exit.TIMEOUT
    assert "still" in timed_out.err
    cancelled = Run("cancel", str(job_id), *connect)
    assert cancelled.code == Exit.OK
    assert "Cancelled" in cancelled.out
    waited = Run("wait", str(job_id), "--json", "--no-progress", *connect)
    assert waited.code == Exit.FAILED
    assert waited.json()["state"] == "Cancelled"


def test_jobs_lists_a_table_or_json_with_filters(connect, world):
    for index in range(3):
        world.submit("vision", name=f"sweep-{index}")
    JobRow.objects.filter(name="sweep-2").update(state=JobState.RUNNING)
    table = Run("jobs", *connect)
    assert table.code == Exit.OK
    assert table.out.splitlines()[0].split()[:3] == ["ID", "NAME", "STATE"]
    assert all(f"sweep-{i}" in table.out for i in range(3))
    running = Run("jobs", "--state", "Running", "--json", *connect).json()
    assert [j["name"] for j in running] == ["sweep-2"]
    assert len(Run("jobs", "--state", "Pending,Running", "--limit", "2", "--json", *connect).json()) == 2
    assert len(Run("jobs", "--all", "--json", *connect).json()) == 3
    assert Run("jobs", "--team", "nlp", *connect).out.strip() == "no jobs"


def test_url_and_token_come_from_the_environment_or_the_config_file_that_login_writes(
    portal_url, key_of, tmp_path, monkeypatch
):
    monkeypatch.delenv("GPUPORTAL_URL", raising=False)
    monkeypatch.delenv("GPUPORTAL_TOKEN", raising=False)
    config = tmp_path / "gpuportal" / "config.toml"
    monkeypatch.setenv("GPUPORTAL_CONFIG", str(config))
    nothing = Run("jobs")
    assert nothing.code == Exit.USAGE
    assert "no portal URL" in nothing.err

    monkeypatch.setenv("GPUPORTAL_URL", portal_url)
    monkeypatch.setenv("GPUPORTAL_TOKEN", key_of("alice"))
    assert Run("jobs").code == Exit.OK

    login = Run("login", "--json")  # URL and token from the environment, checked, then saved
    assert login.code == Exit.OK, login.err
    assert login.json()["teams"] == ["vision"]
    assert config.stat().st_mode & 0o777 == 0o600
    monkeypatch.delenv("GPUPORTAL_URL")
    monkeypatch.delenv("GPUPORTAL_TOKEN")
    assert Run("jobs").code == Exit.OK  # from the file alone

    refused = Run("login", "--token", "gpt_wrong", "--url", portal_url)
    assert refused.code == Exit.ERROR
    assert key_of("bob") not in config.read_text()  # a token that does not work is never saved


def run_in_a_terminal(argv: list[str], timeout_s: float = 60) -> tuple[int, str]:
    """Run a command with a pseudo-terminal (120 columns) as its stdin, stdout and stderr."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(CLIENT), os.environ.get("PYTHONPATH", "")]),
        "TERM": "xterm",
    }
    process = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif process.poll() is not None:
            break
    code = process.wait(timeout=10)
    os.close(master)
    return code, b"".join(chunks).decode("utf-8", "replace")


def test_in_a_terminal_wait_draws_a_live_bar_with_state_and_position(connect, job_yaml, cluster):
    job_id = Run("submit", job_yaml, "--json", *connect).json()["id"]
    code, screen = run_in_a_terminal(
        [sys.executable, "-m", "gpuportal", "wait", str(job_id), "--poll", "0.1", *connect]
    )
    assert code == Exit.OK, screen
    assert "\r" in screen  # redrawn in place
    assert f"job {job_id} resnet |" in screen
    assert "█" in screen
    assert "Succeeded" in screen


@needs_dry_run
def test_check_exits_0_when_it_runs_now_4_when_it_never_fits_and_3_when_it_waits(connect, job_yaml, world):
    runs_now = Run("check", job_yaml, *connect)
    assert runs_now.code == Exit.OK, runs_now.err
    assert runs_now.out.startswith("runs now")
    assert "estimated cost" in runs_now.out
    never = Run("check", job_yaml, "--gpu", "16", "--json", *connect)  # no node has 16 GPUs
    assert never.code == Exit.NEVER
    assert never.json()["verdict"] == "never"
    for _ in range(2):  # both A100 nodes full
        world.submit("vision", gpu=8, allowed_gpu_models=(world.models["A100-80GB"],), runtime_s=36_000)
    cycle_run(backend=SimulatedCluster(speedup=1))
    waits = Run("check", job_yaml, *connect)
    assert waits.code == Exit.WAITS, waits.out
    assert waits.out.startswith("waits")
    assert JobRow.objects.count() == 2  # a check submits nothing


def test_the_yaml_example_in_the_readme_is_a_valid_spec(connect, tmp_path):
    GpuModel.objects.create(name="H100-80GB", memory_gib=80)  # the demo's models (seed_demo)
    readme = (CLIENT.parent / "README.md").read_text()
    block = readme.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert yaml.safe_load(block)["queue"] == "default"
    path = tmp_path / "readme.yaml"
    path.write_text(block)
    run = Run("submit", str(path), "--json", *connect)
    assert run.code == Exit.OK, run.err


def test_spot_checkpoint_and_a_ray_job_are_flags_of_submit(connect):
    run = Run(
        "submit", "--queue", "default", "--image", "nvcr.io/nvidia/pytorch:24.08-py3", "--gpu", "1", "--spot",
        "--checkpoint-path", "s3://ckpt/a", "--max-restarts", "2", "--restart-policy", "never", "--json", *connect,
    )  # fmt: skip
    assert run.code == Exit.OK, run.err
    stored = JobRow.objects.get(pk=run.json()["id"])
    assert (stored.spot, stored.checkpoint_path, stored.max_restarts, stored.restart_policy) == (
        True,
        "s3://ckpt/a",
        2,
        "never",
    )
    ray = Run(
        "submit", "--kind", "ray", "--queue", "default", "--image", "rayproject/ray:2.34.0", "--gpu", "0",
        "--entrypoint", "python tune.py", "--worker-group", "gpu:2:4", "--worker-group", "cpu:3:0:8000:16384",
        "--json", *connect,
    )  # fmt: skip
    assert ray.code == Exit.OK, ray.err
    assert JobRow.objects.get(pk=ray.json()["id"]).ray == {
        "entrypoint": "python tune.py",
        "worker_groups": [
            {"name": "gpu", "replicas": 2, "gpu": 4},
            {"name": "cpu", "replicas": 3, "gpu": 0, "cpu_milli": 8000, "memory_mib": 16384},
        ],
    }
    bad = Run("submit", "--kind", "ray", "--queue", "default", "--image", "rayproject/ray:2.34.0", *connect,
              "--worker-group", "gpu:2:4", "--ray-mode", "cluster", "--entrypoint", "python x.py")  # fmt: skip
    assert bad.code == Exit.USAGE
    assert "ray.entrypoint" in bad.err
    assert Run("submit", "--worker-group", "gpu:two:4", *connect).code == Exit.USAGE
