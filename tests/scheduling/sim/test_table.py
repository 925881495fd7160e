"""The Markdown results table."""

from __future__ import annotations

from scheduling.sim.table import portal_vs_fgd, variants_table


def policy(mean, per_seed=None):
    return {"headline": {"mean": mean, "sd": 0.0, "per_seed": per_seed or {}}}


def test_a_policy_without_a_headline_is_na_and_has_no_comparison():
    summary = {"policies": {"fgd": policy(5.0), "portal": policy(None)}}
    row = variants_table([("tiny", summary)]).splitlines()[-1]
    assert row == "| tiny | 5.00 ± 0.00 |  | n/a |  |  |"


def test_portal_is_compared_with_fgd_relatively_and_seed_by_seed():
    fgd = policy(5.0, {42: 4.0, 43: 6.0, 44: 5.0})
    portal = policy(4.5, {42: 4.5, 43: 4.0, 44: 5.0})  # lower on 43 only; equal on 44 is no win
    assert portal_vs_fgd({"fgd": fgd, "portal": portal}) == (10.0, 1, 3)


def test_fgd_and_bestfit_are_shown_against_the_papers_means_of_that_trace():
    summary = {"policies": {"fgd": policy(12.0), "bestfit": policy(20.0)}}
    row = variants_table([("gpuspec33", summary)]).splitlines()[-1]
    assert "12.00 ± 0.00 (12.16, -0.16)" in row
    assert "20.00 ± 0.00 (19.61, +0.39)" in row
