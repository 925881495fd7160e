"""``gpuportal.spec``: the CLI's job spec from a YAML file and flags."""

from __future__ import annotations

import pytest

from gpuportal.spec import SpecError, key_values, load_spec_file, parse_duration, spec_from


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("3600", 3600), ("90s", 90), ("45m", 2700), ("2h", 7200), ("1h30m", 5400), ("1d", 86400), ("1h0m5s", 3605)],
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "soon", "1.5h", "-5", "h", "5mh"])
def test_bad_durations(text):
    with pytest.raises(SpecError):
        parse_duration(text)


def test_flags_override_the_file_and_merge_into_its_mappings(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("queue: default\nimage: a\ngpu: 2\nruntime: 2h\nlabels: {project: atlas}\n")
    flags = {"gpu": 1, "name": "x", "gpu_model": ["A100-80GB", "H100-80GB"], "label": ["stage=eval"], "runtime": None}
    spec = spec_from(str(path), flags, ["python", "eval.py"])
    assert spec == {
        "queue": "default",
        "image": "a",
        "gpu": 1,
        "name": "x",
        "runtime_s": 7200,
        "labels": {"project": "atlas", "stage": "eval"},
        "allowed_gpu_models": ["A100-80GB", "H100-80GB"],
        "command": ["python", "eval.py"],
    }
    with pytest.raises(SpecError, match="not both"):
        spec_from(None, {"command": "python a.py"}, ["python", "b.py"])


def test_a_file_that_is_not_a_mapping_or_not_yaml_is_refused_by_name(tmp_path):
    (tmp_path / "list.yaml").write_text("- a\n")
    (tmp_path / "bad.yaml").write_text("queue: [\n")
    (tmp_path / "both.yaml").write_text("runtime: 1h\nruntime_s: 60\n")
    with pytest.raises(SpecError, match="must hold a mapping"):
        load_spec_file(str(tmp_path / "list.yaml"))
    with pytest.raises(SpecError, match="not valid YAML"):
        load_spec_file(str(tmp_path / "bad.yaml"))
    with pytest.raises(SpecError, match="not both"):
        load_spec_file(str(tmp_path / "both.yaml"))
    (tmp_path / "empty.yaml").write_text("# nothing yet\n")
    assert load_spec_file(str(tmp_path / "empty.yaml")) == {}


def test_key_values():
    assert key_values(["a=1", "b=x=y", "c="], "--label") == {"a": "1", "b": "x=y", "c": ""}
    with pytest.raises(SpecError, match="--label takes KEY=VALUE"):
        key_values(["novalue"], "--label")
