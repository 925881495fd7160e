"""``gpuportal.http``: retries against the live portal's own 429s (its throttles), its own 503s (its
database-outage guard, with the database made to fail), a port nobody listens on, and an answer lost
on the way back (the request reached the portal, the client never saw the reply)."""

from __future__ import annotations

import socket
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
import requests
from requests.adapters import HTTPAdapter

from gpuportal import ConnectionFailed, Portal, RateLimited, ServiceUnavailable
from gpuportal.errors import ConfigError
from gpuportal.http import api_root, retry_after_s
from portal.jobs.models import Job as JobRow
from tests.client.gpuportal.test_client import SPEC

live = pytest.mark.django_db(transaction=True)


class Sleeps(list[float]):
    """A ``sleep`` that records each wait (and waits for real when asked to)."""

    def __init__(self, *, real: bool = False) -> None:
        super().__init__()
        self.real = real

    def __call__(self, seconds: float) -> None:
        self.append(seconds)
        if self.real:
            import time

            time.sleep(seconds)


@live
def test_a_throttled_client_waits_the_portals_retry_after_and_then_succeeds(portal_url, key_of, settings):
    # One request a second: the second of two back-to-back requests is throttled even on a loaded machine.
    settings.API_THROTTLE_USER = "1/s"
    sleeps = Sleeps(real=True)
    portal = Portal(portal_url, key_of("alice"), sleep=sleeps)
    results = [portal.teams() for _ in range(3)]
    assert results == [["vision"]] * 3
    assert sleeps, "back-to-back requests at one a second must have been throttled"
    assert all(0 < s <= 1 for s in sleeps)  # DRF's Retry-After for a 1-second window

    impatient = Portal(portal_url, key_of("bob"), max_retries=0)
    impatient.teams()
    with pytest.raises(RateLimited) as limited:
        impatient.teams()
    assert limited.value.status == 429
    assert limited.value.retry_after is not None
    assert limited.value.retry_after <= 1


@live
def test_a_retry_after_longer_than_the_client_will_wait_is_raised_at_once(portal_url, key_of, settings):
    settings.API_THROTTLE_USER = "2/min"
    sleeps = Sleeps()
    portal = Portal(portal_url, key_of("alice"), sleep=sleeps, max_retry_wait_s=5)
    portal.teams()
    portal.teams()
    with pytest.raises(RateLimited) as limited:
        portal.teams()
    assert sleeps == []
    assert limited.value.retry_after is not None
    assert limited.value.retry_after > 5


@live
def test_while_the_database_is_down_the_client_retries_after_the_portals_503_and_submits_once(
    portal_url, key_of, outage, settings
):
    settings.DB_OUTAGE_RETRY_AFTER_S = 2
    sleeps = Sleeps()
    portal = Portal(portal_url, key_of("alice"), sleep=sleeps)
    outage.failures = 2  # the next two requests find the database down
    job = portal.submit(SPEC)
    assert outage.failed == 2
    assert sleeps == [2.0, 2.0]
    assert JobRow.objects.filter(pk=job.id).count() == 1
    assert JobRow.objects.count() == 1

    outage.failures = 10
    with pytest.raises(ServiceUnavailable) as down:
        Portal(portal_url, key_of("alice"), sleep=sleeps, max_retries=2).job(job.id)
    assert down.value.status == 503
    assert down.value.retry_after == 2
    assert "database" in down.value.detail


class LoseFirstAnswer(HTTPAdapter):
    """Delivers the first POST to the portal, then drops its answer as a broken connection would."""

    def __init__(self) -> None:
        super().__init__()
        self.lost = 0

    def send(self, request, *args, **kwargs):
        response = super().send(request, *args, **kwargs)
        if request.method == "POST" and self.lost == 0:
            self.lost += 1
            raise requests.ConnectionError("connection reset by peer (after the portal answered)")
        return response


@live
def test_a_submit_whose_answer_was_lost_is_retried_with_its_key_and_makes_one_job(portal_url, key_of):
    session = requests.Session()
    adapter = LoseFirstAnswer()
    session.mount("http://", adapter)
    job = Portal(portal_url, key_of("alice"), session=session, sleep=Sleeps()).submit(SPEC)
    assert adapter.lost == 1
    assert JobRow.objects.count() == 1  # the portal stored it once and replayed it for the retry
    assert JobRow.objects.get().pk == job.id


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_portal_nobody_answers_for_is_retried_a_bounded_number_of_times():
    sleeps = Sleeps()
    portal = Portal(f"http://127.0.0.1:{free_port()}", "gpt_x", sleep=sleeps, max_retries=3)
    with pytest.raises(ConnectionFailed) as failed:
        portal.submit(SPEC)  # refused connections are safe to retry, even for a POST
    assert failed.value.status is None
    assert len(sleeps) == 3
    assert sleeps[0] < sleeps[1] < sleeps[2] <= 8 * 1.25  # doubling back-off with jitter, capped


def test_retry_after_is_read_as_seconds_or_as_an_http_date():
    now = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
    assert retry_after_s("7", now=now) == 7
    assert retry_after_s(format_datetime(now + timedelta(seconds=30), usegmt=True), now=now) == 30
    assert retry_after_s(format_datetime(now - timedelta(seconds=30), usegmt=True), now=now) == 0
    assert retry_after_s("soon", now=now) is None
    assert retry_after_s(None) is None


@pytest.mark.parametrize(
    ("url", "root"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000/api/v1/"),
        ("https://gpu.example.com/", "https://gpu.example.com/api/v1/"),
        ("https://example.com/portal/api/v1/", "https://example.com/portal/api/v1/"),
        ("https://example.com/portal", "https://example.com/portal/api/v1/"),
    ],
)
def test_the_api_root_follows_the_portals_url(url, root):
    assert api_root(url) == root


@pytest.mark.parametrize("url", ["", "gpu.example.com", "ftp://gpu.example.com", "http://"])
def test_a_url_that_is_not_http_is_a_config_error(url):
    with pytest.raises(ConfigError):
        api_root(url)
