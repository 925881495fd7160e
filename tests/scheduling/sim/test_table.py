"""The Markdown results table."""

from __future__ import annotations

from scheduling.sim.table import variants_table


def policy(mean):
    return {"headline": {"mean": mean, "sd": 0.0}}


def test_a_policy_without_a_headline_is_na_and_has_no_difference():
    summary = {"policies": {"fgd": policy(5.0), "portal": policy(None)}}
    row = variants_table([("tiny", summary)]).splitlines()[-1]
    assert row == "| tiny | 5.00 ± 0.00 | n/a |  |"
