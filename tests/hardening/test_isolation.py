"""Two tenants: a member of team nlp, over every route of the URL conf with every method, sees
nothing of team vision and changes nothing of it (see ``isolation.py``)."""

from __future__ import annotations

import pytest
from drf_spectacular.generators import SchemaGenerator

from tests.hardening.isolation import isolation_sweep, routes

pytestmark = pytest.mark.django_db


def test_a_member_of_one_team_sees_and_changes_nothing_of_another_over_every_route(world):
    sweep = isolation_sweep(world)
    assert sweep.problems == []
    assert sweep.routes == routes()
    print(f"\n{len(sweep.routes)} routes, {sweep.requests} requests, 0 leaks")


def test_the_sweep_enumerates_every_route_and_every_api_path_of_the_schema(world):
    every = routes()
    assert len(every) > 150  # the admin's, the pages', the API's (with format suffixes)
    schema_paths = SchemaGenerator().get_schema(request=None, public=True)["paths"]
    as_routes = {r.replace("^", "").replace("$", "").replace("\\.", ".") for r in every}
    for path in schema_paths:
        flat = path.strip("/")
        found = any(
            route.rstrip("/").split("(?P<")[0].split("<")[0] == flat.split("{")[0].rstrip("/")
            or route.rstrip("/") == flat
            for route in as_routes
        )
        assert found, f"{path} of the schema is not among the URL conf's routes"


def test_a_new_route_is_checked_without_anyone_adding_it_to_the_test(world, settings):
    settings.ROOT_URLCONF = "tests.hardening.leaky_urls"
    sweep = isolation_sweep(world, urlconf="tests.hardening.leaky_urls")
    assert "api/v1/job-names/<int:pk>/" in sweep.routes
    assert any(p.startswith("GET /api/v1/job-names/") and "team vision's data" in p for p in sweep.problems)
