"""``gpuportal.errors``: an error answer becomes the exception of its status, with the portal's field
errors flattened to dotted paths."""

from __future__ import annotations

import pytest

from gpuportal.errors import (
    AuthenticationError,
    Conflict,
    NotFound,
    PermissionDenied,
    PortalError,
    RateLimited,
    ServerError,
    ServiceUnavailable,
    ValidationError,
    error_for,
    flatten_errors,
)


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (400, ValidationError),
        (401, AuthenticationError),
        (403, PermissionDenied),
        (404, NotFound),
        (409, Conflict),
        (413, ValidationError),
        (422, ValidationError),
        (429, RateLimited),
        (500, ServerError),
        (502, ServerError),
        (503, ServiceUnavailable),
        (418, PortalError),
    ],
)
def test_each_status_has_its_exception_class(status, cls):
    error = error_for(status, {"detail": "nope"}, retry_after=3)
    assert type(error) is cls
    assert (error.status, error.detail, error.retry_after) == (status, "nope", 3)


def test_nested_field_errors_become_dotted_paths():
    errors = {
        "gpu_milli": ["set only one of ..."],
        "tolerations": {"0": {"operator": ['"Sometimes" is not a valid choice.']}},
        "labels": [{}, {"key": ["too long"]}],
        "body": "larger than 1 bytes",
    }
    assert flatten_errors(errors) == {
        "gpu_milli": ["set only one of ..."],
        "tolerations.0.operator": ['"Sometimes" is not a valid choice.'],
        "labels.1.key": ["too long"],
        "body": ["larger than 1 bytes"],
    }


def test_the_message_names_every_field_and_a_body_without_detail_still_says_something():
    error = error_for(400, {"detail": "invalid input: a: bad", "errors": {"a": ["bad"], "b": ["worse", "worst"]}})
    assert str(error) == "400 invalid input: a: bad (a: bad | b: worse; worst)"
    assert str(error_for(400, {"errors": {"a": ["bad"]}})) == "400 a: bad"
    assert error_for(502, "<html><body>Bad   gateway</body></html>").detail == "<html><body>Bad gateway</body></html>"
    assert error_for(500, None).detail == "HTTP 500"
