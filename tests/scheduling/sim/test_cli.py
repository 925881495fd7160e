"""End to end through main(argv) on small generated traces: files, columns, summary."""

from __future__ import annotations

import csv
import json
import re

from scheduling.sim import table
from scheduling.sim.cli import main, parse_seeds
from scheduling.sim.report import PLACEMENT_COLUMNS, REPLAY_EXTRA_COLUMNS
from scheduling.sim.trace import read_nodes, read_pods


def test_seed_ranges_and_lists_parse():
    assert parse_seeds("42-45") == [42, 43, 44, 45]
    assert parse_seeds("1,3-4, 9") == [1, 3, 4, 9]


def test_arrival_mode_writes_summary_placements_and_report(trace_files, tmp_path, capsys):
    nodes, pods = trace_files
    out = tmp_path / "out"
    args = ["--nodes", str(nodes), "--pods", str(pods), "--seeds", "1-2", "--out", str(out), "--no-progress"]
    assert main([*args, "--policy", "fgd", "--policy", "default", "--policy", "random"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary["policies"]) == ["fgd", "portal", "random"]
    fgd = summary["policies"]["fgd"]
    assert set(fgd["headline"]["per_seed"]) == {"1", "2"}
    assert len(fgd["curve"]["unallocated_pct"]) == 131
    assert {"failed_pods", "fragmentation", "wall_s"} <= set(fgd)
    assert (out / "report.html").read_text().count("plotly") > 0
    names = {p.name for p in read_pods(pods)}
    node_names = {n.name for n in read_nodes(nodes)}
    with open(out / "placements-portal-2.csv", newline="") as fh:
        rows = list(csv.reader(fh))
    assert tuple(rows[0]) == PLACEMENT_COLUMNS
    assert [int(r[0]) for r in rows[1:]] == list(range(len(rows) - 1))
    for r in rows[1:]:
        assert r[1].split("-tuned-")[0] in names
        assert r[2] == "" or r[2] in node_names
        assert (r[3] == "") == (r[2] == "" or r[4] == "0")
    assert "fgd" in capsys.readouterr().out
    assert table.main([str(out), str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| FGD |" in printed
    assert "portal vs FGD" in printed


def test_the_papers_figure_is_shown_only_beside_the_papers_own_trace(trace_files, tmp_path, capsys):
    """A trace the paper did not publish gets no "paper" figure; the same pods under the paper's file
    names get the published means of that trace (FGD on gpuspec33: 12.16; the default's: 4.77)."""
    nodes, pods = trace_files
    runs = {
        "mine": (nodes, pods),
        "spec": (tmp_path / "openb_node_list_gpu_node.csv", tmp_path / "openb_pod_list_gpuspec33.csv"),
        "default": (tmp_path / "openb_node_list_all_node.csv", tmp_path / "openb_pod_list_default.csv"),
    }
    for name, (n, p) in runs.items():
        if name != "mine":
            n.write_bytes(nodes.read_bytes())
            p.write_bytes(pods.read_bytes())
        out = tmp_path / name
        args = ["--nodes", str(n), "--pods", str(p), "--seeds", "1", "--out", str(out), "--no-progress"]
        assert main([*args, "--policy", "fgd", "--policy", "random", "--no-placements"]) == 0
    printed = capsys.readouterr().out
    fgd_rows = [line.split() for line in printed.splitlines() if line.startswith("fgd ")]
    assert [len(row) for row in fgd_rows] == [6, 7, 7]  # no paper column value for "mine"
    assert [row[3] for row in fgd_rows[1:]] == ["12.16", "4.77"]
    papers = {
        name: {
            k: v["headline"]["paper"]
            for k, v in json.loads((tmp_path / name / "summary.json").read_text())["policies"].items()
        }
        for name in runs
    }
    assert papers == {
        "mine": {"fgd": None, "random": None},
        "spec": {"fgd": 12.16, "random": None},  # the paper publishes FGD and BestFit per variant
        "default": {"fgd": 4.77, "random": 13.70},
    }
    assert table.main([str(tmp_path / "mine")]) == 0
    fgd_line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| FGD |"))
    assert fgd_line.split("|")[3].strip() == ""  # the paper column


def test_replay_mode_reports_delays_and_allocation_over_time(trace_files, tmp_path):
    nodes, pods = trace_files
    out = tmp_path / "replay"
    files = ["--nodes", str(nodes), "--pods", str(pods), "--out", str(out)]
    code = main(
        [*files, "--mode", "replay", "--seeds", "3", "--policy", "bestfit", "--compress", "20", "--no-progress"]
    )
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    bestfit = summary["policies"]["bestfit"]
    assert {"p50", "p90", "p99", "max"} <= set(bestfit["queue_delay_s"])
    assert len(bestfit["series"]["time_s"]) == len(bestfit["series"]["allocated_pct"])
    with open(out / "placements-bestfit-3.csv", newline="") as fh:
        header = next(csv.reader(fh))
    assert tuple(header) == PLACEMENT_COLUMNS + REPLAY_EXTRA_COLUMNS


def test_parallel_jobs_give_the_same_numbers(trace_files, tmp_path):
    nodes, pods = trace_files
    base = ["--nodes", str(nodes), "--pods", str(pods), "--seeds", "1-2", "--policy", "packing", "--no-progress"]
    main([*base, "--out", str(tmp_path / "a")])
    main([*base, "--out", str(tmp_path / "b"), "--jobs", "2"])
    a = json.loads((tmp_path / "a" / "summary.json").read_text())["policies"]["packing"]["headline"]
    b = json.loads((tmp_path / "b" / "summary.json").read_text())["policies"]["packing"]["headline"]
    assert a["per_seed"] == b["per_seed"]


def test_the_django_command_passes_its_arguments_to_main(trace_files, tmp_path):
    from scheduling.management.commands.simulate import Command

    nodes, pods = trace_files
    out = tmp_path / "django"
    argv = ["manage.py", "simulate", "--nodes", str(nodes), "--pods", str(pods), "--out", str(out)]
    Command().run_from_argv([*argv, "--policy", "bestfit", "--seeds", "5", "--no-progress"])
    assert json.loads((out / "summary.json").read_text())["seeds"] == [5]


def test_call_command_runs_the_simulator_and_writes_a_self_contained_report(trace_files, tmp_path):
    from django.core.management import call_command

    nodes, pods = trace_files
    out = tmp_path / "call"
    call_command(
        "simulate", "--nodes", str(nodes), "--pods", str(pods), "--out", str(out),
        "--policy", "fgd", "--seeds", "3", "--no-progress",
    )  # fmt: skip
    assert json.loads((out / "summary.json").read_text())["seeds"] == [3]
    report = (out / "report.html").read_text()
    assert not re.search(r"<script[^>]+src=\"https?://", report)  # nothing fetched from a CDN
    assert "Plotly" in report  # plotly.js is inline, so the report opens without a network


def test_the_paper_command_runs_each_trace_and_prints_the_comparison(trace_files, tmp_path, capsys):
    from scheduling.sim import paper

    nodes, pods = trace_files
    out = tmp_path / "paper"
    args = ["--nodes", str(nodes), "--pods", str(pods), "--out", str(out), "--seeds", "1", "default", "gpuspec33"]
    assert paper.main(args) == 0
    assert (out / "variants" / "openb_pod_list_gpuspec33.csv").exists()
    printed = capsys.readouterr().out
    rows = [line for line in printed.splitlines() if line.startswith(("| default |", "| gpuspec33 |"))]
    assert len(rows) == 2
    assert "(12.16, " in rows[1]  # FGD against the paper's published gpuspec33 mean
    assert rows[1].count("/1 |") == 1  # seeds where portal beats FGD, out of the one seed
