"""Image references follow the OCI distribution reference grammar (what container runtimes accept)."""

from __future__ import annotations

import pytest

from portal.jobs.images import image_reference_problem

DIGEST = "sha256:" + "0123456789abcdef" * 4


@pytest.mark.parametrize(
    "reference",
    [
        "ubuntu",
        "pytorch:2.4",
        "nvcr.io/nvidia/pytorch:24.08-py3",
        "registry.example.com:5000/team/trainer:v1.2_rc-3",
        "localhost/img",
        "localhost:5000/a/b:latest",
        "Registry.Example.com/lower/path",  # a registry host may be upper case
        "[::1]:5000/img:tag",
        f"ghcr.io/org/img@{DIGEST}",
        f"img:tag@{DIGEST}",
        "a__b/c.d/e-f--g",
        "x" * 255,
    ],
)
def test_references_a_container_runtime_accepts_pass(reference):
    assert image_reference_problem(reference) is None


@pytest.mark.parametrize(
    ("reference", "why"),
    [
        ("", "required"),
        ("not a valid image ref!!", "white space"),
        (" ubuntu", "white space"),
        ("Ubuntu", "lower case"),
        ("Team/img", "lower case"),  # no dot, colon or localhost: a path component, so lower case
        ("a//b", "not an image reference like"),
        ("a/", "not an image reference like"),
        ("-a", "not an image reference like"),
        ("a___b", "not an image reference like"),
        ("img:-tag", "not an image reference like"),
        ("img:" + "t" * 129, "not an image reference like"),
        ("img@sha256:abc", "not an image reference like"),
        ("img!", "not an image reference like"),
        ("x" * 256, "longer than 255"),
    ],
)
def test_anything_else_is_refused_with_the_reason(reference, why):
    problem = image_reference_problem(reference)
    assert problem is not None
    assert why in problem
