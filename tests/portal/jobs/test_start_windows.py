"""A job's start window is checked at submission, naming the field."""

from __future__ import annotations

import pytest

from portal.jobs.errors import ServiceError


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        ({"start_window": "8pm-8am"}, "start_window", "not a time"),
        ({"start_window": "20:00"}, "start_window", "span like 20:00-08:00"),
        ({"start_window": "20:00-24:00"}, "start_window", "time of day"),
        ({"start_window": "20:00-08:00", "window_timezone": "Moon/Base"}, "window_timezone", "IANA"),
        ({"start_window": "20:00-08:00", "off_peak": True}, "start_window", "off-peak"),
    ],
)
def test_a_bad_start_window_is_refused_naming_the_field(world, overrides, field, words):
    with pytest.raises(ServiceError) as exc:
        world.submit(**overrides)
    assert exc.value.field == field
    assert words in exc.value.message


@pytest.mark.django_db
def test_a_job_with_a_night_window_is_stored_with_it(world):
    job = world.submit(start_window="22:00-06:00", window_timezone="Asia/Tokyo")
    assert (job.start_window, job.window_timezone, job.off_peak) == ("22:00-06:00", "Asia/Tokyo", False)
