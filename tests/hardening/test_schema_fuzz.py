"""Every operation of the OpenAPI schema, fed generated and hostile input: never a server error.

Schemathesis generates requests from the schema drf-spectacular produces (so a new endpoint is
covered as soon as it is in the schema): valid ones (positive mode) and ones that break the schema
(negative mode: wrong types, missing or extra fields, out-of-range numbers), with Hypothesis' strings
in every path parameter, query parameter and body field; and hostile mode: valid requests with
the values that broke servers before (NUL, control characters, 5,000-character strings, numbers past
every column's range, wrong types, deep nesting) in their path and query parameters and a body
field. Each goes through the whole Django stack in-process (WSGI), authenticated as a tenant (and
as a platform admin for admin-only writes). A 5xx fails the test; 4xx answers are expected.

Bounded: ``FUZZ_EXAMPLES`` examples per operation and mode (default 12), derandomized so CI runs are
reproducible; ``FUZZ_EXAMPLES=500`` for a long local run.
"""

from __future__ import annotations

import json
import os

import pytest
import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from portal.tokens.services import api_token_create

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "12"))
SCHEMA = SchemaGenerator().get_schema(request=None, public=True)
API = schemathesis.openapi.from_dict(SCHEMA)
API.app = get_wsgi_application()
OPERATIONS = [result.ok() for result in API.get_all_operations()]  # type: ignore[union-attr]  # fails on a bad schema


@pytest.fixture(autouse=True)
def _keep_the_test_connection():
    """Django closes the database connection when a WSGI request ends; the test's transaction lives
    on that connection, so (as Django's own test client does) requests here leave it open."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


def test_the_fuzzer_covers_every_operation_of_the_schema():
    in_schema = {(method.upper(), path) for path, item in SCHEMA["paths"].items() for method in item}
    assert {(op.method.upper(), op.path) for op in OPERATIONS} == in_schema
    assert len(in_schema) >= 15


def _existing_name(path: str) -> str:
    for prefix, name in (("/api/v1/gpu-models/", "A100-80GB"), ("/api/v1/priority-classes/", "default")):
        if path.startswith(prefix):
            return name
    return "cq-vision"


# Values that broke the server in the adversarial test, or that commonly do: NUL, control and
# direction characters, very long text, numbers past every column's range, wrong types, deep nesting.
HOSTILE_STRINGS = [
    "\x00", "a\x00b", "%00", "\u202e", "\x1b[2J", "😀" * 50, "x" * 5000, "../../etc/passwd", "' OR 1=1 --",
    "<script>alert(1)</script>", "-1", "9" * 40, " ", "",
]  # fmt: skip
HOSTILE_VALUES = [
    *HOSTILE_STRINGS, 10**30, 2**63, -(2**63) - 1, 1e308, -1, 0, True, None, [], {}, ["\x00"], {"\x00": 1},
    json.loads("[" * 60 + "]" * 60),
]  # fmt: skip
MODES = ["positive", "negative", "hostile"]


def hostile_cases(operation, known: dict[str, object]):
    """A valid case with hostile values in its path parameters, query and one body field."""

    @st.composite
    def draw(data):
        path = {
            p.name: data(st.sampled_from([*HOSTILE_STRINGS, known[p.name]] if p.name in known else HOSTILE_STRINGS))
            for p in operation.path_parameters
        }
        query = {p.name: data(st.sampled_from(HOSTILE_STRINGS)) for p in operation.query if data(st.booleans())}
        case = data(operation.as_strategy(GenerationMode.POSITIVE, path_parameters=path, query=query or None))
        if isinstance(case.body, dict):
            field = data(st.sampled_from([*case.body, "unknown_field"]))
            case.body = {**case.body, field: data(st.sampled_from(HOSTILE_VALUES))}
        return case

    return draw()


@pytest.mark.django_db
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("operation", OPERATIONS, ids=lambda op: f"{op.method.upper()} {op.path}")
def test_no_generated_or_hostile_request_gets_a_server_error(world, operation, mode):
    job = world.submit("vision")
    world.submit("nlp")
    user = world.users["admin" if operation.method.upper() in ("PATCH", "PUT", "DELETE") else "alice"]
    _, key = api_token_create(user=user, name="fuzz")
    headers = {"Authorization": f"Token {key}"}
    # Half the cases address objects that exist, so the request gets past the lookup to the code
    # that reads its body and query; the other half fuzz the path parameters themselves.
    existing = {
        "id": job.pk, "slug": "vision", "name": _existing_name(operation.path), "format": "json",
    }  # fmt: skip
    known = {p.name: existing[p.name] for p in operation.path_parameters if p.name in existing}
    if mode == "hostile":
        strategy = hostile_cases(operation, known)
    else:
        strategy = operation.as_strategy(GenerationMode(mode))
        if known:
            strategy = strategy | operation.as_strategy(GenerationMode(mode), path_parameters=known)

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def request_never_fails_on_the_server(case) -> None:
        response = case.call(headers=headers)
        assert response.status_code < 500, (
            f"{case.method} {case.formatted_path} query={case.query!r} body={case.body!r}: "
            f"{response.status_code} {response.content[:500]!r}"
        )

    try:
        request_never_fails_on_the_server()
    except Unsatisfiable:
        # Nothing in this operation's schema can be made invalid (no body, only free-text parameters):
        # its positive run already sends arbitrary strings everywhere.
        assert mode == "negative"
        pytest.skip("no invalid request can be made from this operation's schema")
