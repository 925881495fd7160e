"""A job request's fields are listed once (``JobSpec``); the API and the form are held to that list."""

from __future__ import annotations

from portal.api.job_create import JobCreateSerializer
from portal.api.serializers import JobSerializer
from portal.jobs.services import SPEC_FIELDS
from portal.pages.forms import JobForm

# The API names the team by slug (plus an optional namespace check) and the queue by name.
API_NAMES = {"local_queue": "queue"}


def test_the_submit_shape_has_exactly_the_spec_fields():
    expected = {API_NAMES.get(name, name) for name in SPEC_FIELDS} | {"namespace"}
    assert set(JobCreateSerializer().fields) == expected


def test_the_read_shape_shows_every_spec_field():
    missing = {API_NAMES.get(name, name) for name in SPEC_FIELDS} - set(JobSerializer.Meta.fields)
    assert missing == set()


def test_every_form_field_is_a_spec_field(db):
    form = JobForm(queues=[])
    assert set(form.fields) - {API_NAMES.get(name, name) for name in SPEC_FIELDS} == set()
