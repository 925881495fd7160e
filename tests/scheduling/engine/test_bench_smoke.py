"""The benchmark's synthetic cluster still builds and schedules (a small instance)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from scheduling.engine.cycle import run_cycle
from scheduling.engine.model import Policy, WorkloadState

BENCH = Path(__file__).resolve().parents[3] / "bench" / "bench_cycle.py"


@pytest.mark.parametrize("rules", [0.0, 0.5])
def test_a_small_bench_cycle_decides_every_pending_job(rules):
    spec = importlib.util.spec_from_file_location("bench_cycle", BENCH)
    assert spec is not None
    assert spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    snapshot = bench.build(nodes=60, jobs=200, queues=10, running=0.5, seed=2, rules=rules)
    assert any(w.rules is not None for w in snapshot.workloads) is (rules > 0)
    plan = run_cycle(snapshot, Policy(placement="binpack", seed=2), 5000.0)
    pending = {w.id for w in snapshot.workloads if w.state == WorkloadState.PENDING}
    decided = {a.workload_id for a in plan.admissions} | {p.workload_id for p in plan.pending}
    assert decided == pending
    assert plan.admissions
    assert any(p.reason.kind == "budget" for p in plan.pending)


def test_the_estimate_bench_runs_with_every_option(tmp_path):
    """Each of bench_estimate.py's flags still reaches the replay (a merge once dropped one the replay reads)."""
    import subprocess
    import sys

    script = BENCH.parent / "bench_estimate.py"
    dump = tmp_path / "estimates.csv"
    args = ["--nodes", "2", "--jobs", "30", "--hours", "2", "--censored", "--arrival-upper", "--no-aged-runtimes"]
    args += ["--known-runtimes", "--known-arrivals", "--dump", str(dump)]
    done = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "P50 estimate" in done.stdout
    assert dump.read_text().count("\n") > 1
