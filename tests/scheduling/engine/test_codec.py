"""Snapshot JSON format: round trip, readable shape, clear errors, and schedule_snapshot."""

from __future__ import annotations

import dataclasses
import json
import re
import typing
from pathlib import Path

import pytest

from scheduling.engine.codec import (
    SnapshotFormatError,
    cycle_input_from_json,
    plan_to_json,
    snapshot_from_json,
    snapshot_to_json,
)
from scheduling.engine.cycle import run_cycle
from scheduling.engine.model import ForeignUsage, Policy, Taint, Toleration, labels_of
from scheduling.management.commands.schedule_snapshot import schedule_file

from .builders import RACK, cq, job, lq, node, running, snapshot


def sample():
    return snapshot(
        [node("n1", labels={RACK: "r1"}, taints=(Taint("spot", "true"),)), node("m1", mig=True, gpus=2)],
        [cq("q", {"A100-80GB": (8, 2, None)}, cohort="co", cpu_milli=64_000)],
        [lq("a", "q", max_pending=10)],
        [
            running("r", "a", [("n1", (0, 1))], started=5.0),
            job(
                "j",
                "a",
                gpu=2,
                replicas=2,
                min_available=1,
                tolerations=(Toleration("spot", "Exists"),),
                node_selector=labels_of({RACK: "r1"}),
                preferred_labels=((RACK, "r1", 10),),
            ),
            job("m", "a", mig="3g.40gb"),
        ],
        foreign=(ForeignUsage("n1", (7,), 1000, 500, 100),),
        teams_blocked=(("b", "over budget"),),
        mig_profiles=(("A100-80GB", ("1g.10gb", "3g.40gb")),),
        gpu_memory_gib=(("A100-80GB", 80),),
    )


def test_round_trip_is_exact_through_json_text():
    snap = sample()
    text = json.dumps(snapshot_to_json(snap))
    assert snapshot_from_json(json.loads(text)) == snap


def test_the_format_is_readable():
    data = snapshot_to_json(sample())
    assert data["nodes"][0]["labels"] == {RACK: "r1"}
    assert data["teams_blocked"] == {"b": "over budget"}
    assert data["workloads"][1]["resources"] == {"gpu": 2, "cpu_milli": 1000, "memory_mib": 1024}
    assert "unschedulable" not in data["nodes"][0]  # defaults are left out
    assert data["workloads"][0]["state"] == "running"


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d["nodes"][0].update(gpus=3), "snapshot.nodes[0]: unknown field(s) gpus"),
        (lambda d: d["nodes"][0].update(gpu_count="8"), "snapshot.nodes[0].gpu_count: expected an integer"),
        (lambda d: d["workloads"][0].update(state="sleeping"), "snapshot.workloads[0].state: 'sleeping' is not one"),
        (lambda d: d["nodes"][0].pop("name"), "snapshot.nodes[0]: missing field name"),
    ],
)
def test_errors_name_the_path(mutate, message):
    data = snapshot_to_json(sample())
    mutate(data)
    with pytest.raises(SnapshotFormatError, match=re.escape(message)):
        snapshot_from_json(data)


def test_plan_json_has_admissions_reasons_and_estimates():
    plan = run_cycle(sample(), Policy(), 100.0)
    out = plan_to_json(plan)
    assert set(out) == {"admissions", "preemptions", "pending", "stats"}
    json.dumps(out)
    for p in out["pending"]:
        assert {"workload_id", "position", "estimated_start", "reason"} <= set(p)
        assert set(p["reason"]) == {"kind", "message", "details"}


def test_schedule_file_runs_a_cycle_with_the_files_policy_and_now(tmp_path):
    data = snapshot_to_json(sample())
    data["policy"] = {"placement": "spread", "seed": 4}
    data["now"] = 123.0
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(data))
    out = schedule_file(path)
    assert out["now"] == 123.0
    snap, policy, now = cycle_input_from_json(data)
    assert out["admissions"] == plan_to_json(run_cycle(snap, policy, now))["admissions"]
    assert schedule_file(path, placement="binpack", now=5.0)["now"] == 5.0


def test_schedule_file_rejects_a_bad_policy(tmp_path):
    data = snapshot_to_json(sample())
    data["policy"] = {"placment": "spread"}
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(data))
    with pytest.raises(SnapshotFormatError, match="policy: unknown field"):
        schedule_file(path)


def test_the_documented_example_parses_and_schedules(tmp_path):
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[3] / "docs" / "snapshot-format.md").read_text()
    example = doc.split("## Example", 1)[1].split("```json", 1)[1].split("```", 1)[0]
    path = tmp_path / "example.json"
    path.write_text(example)
    out = schedule_file(path)
    assert [a["workload_id"] for a in out["admissions"]] == ["train-1"]
    assert out["now"] == 1732170000
    (waiting,) = out["pending"]
    assert waiting["reason"]["message"] == (
        "placement: 0 of 2 nodes fit: 1 too few free GPUs, 1 untolerated taint; needs 4 free A100-80GB GPUs on "
        "one node; eligible nodes have at most 3 free each and 3.75 in all (capacity in use)"
    )
    assert waiting["reason"]["waits"] is True
    assert waiting["estimated_start"] == 1732170000 + 7200  # when train-1 ends


def test_the_management_command_prints_the_plan(tmp_path):
    from io import StringIO

    from django.core.management import call_command

    path = tmp_path / "snap.json"
    path.write_text(json.dumps(snapshot_to_json(sample())))
    out = StringIO()
    call_command("schedule_snapshot", str(path), "--placement", "spread", "--now", "50", stdout=out)
    plan = json.loads(out.getvalue())
    assert plan["now"] == 50.0
    assert {"admissions", "preemptions", "pending", "stats"} <= set(plan)


def test_the_management_command_reports_a_bad_file(tmp_path):
    from django.core.management import CommandError, call_command

    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"nodes": []}))
    with pytest.raises(CommandError, match="missing field cluster_queues"):
        call_command("schedule_snapshot", str(path))


def _readable_classes() -> list[type]:
    """Every dataclass a snapshot file or a policy may hold, reached through the field types."""
    from scheduling.engine import model

    seen: list[type] = []
    todo: list[object] = [model.Snapshot, model.Policy]
    while todo:
        tp = todo.pop()
        if dataclasses.is_dataclass(tp) and isinstance(tp, type):
            if tp in seen:
                continue
            seen.append(tp)
            todo.extend(typing.get_type_hints(tp).values())
        else:
            todo.extend(typing.get_args(tp))
    return seen


def test_every_field_a_snapshot_file_may_hold_is_documented():
    # The codec maps every dataclass field mechanically, so a field added to the model is readable at
    # once; docs/snapshot-format.md must name it, or a hand-written snapshot cannot know it exists.
    # A name counts when it is written in code: `name` in a table, or in an inline shape `{key, value}`.
    doc = (Path(__file__).resolve().parents[3] / "docs" / "snapshot-format.md").read_text()
    named = {word for span in re.findall(r"`([^`]*)`", doc) for word in re.findall(r"[A-Za-z_]\w*", span)}
    missing = [
        f"{cls.__name__}.{f.name}"
        for cls in _readable_classes()
        for f in dataclasses.fields(cls)
        if f.name not in named
    ]
    assert missing == []
