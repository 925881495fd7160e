"""Fixtures for the client and CLI tests: a live portal (pytest-django's ``live_server``: a real HTTP
server in a thread over the real PostgreSQL), the in-process demo loop driving the simulated cluster,
tokens, and a way to make the portal's database fail for a few requests.

The demo loop is ``rundemo``'s own ``scheduler_loop``: the scheduling cycle every ``interval_s``, the
simulated cluster running a job for ``runtime_s / SIM_SPEEDUP`` wall seconds, so a job submitted with
``runtime_s=60`` goes Pending → Admitted → Running → Succeeded in about half a second.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
from django.db import OperationalError, connections
from django.db.backends.signals import connection_created
from django.urls import Resolver404, resolve

from billing.services import price_book_seed_defaults
from portal.jobs.management.commands.rundemo import scheduler_loop
from portal.tokens.services import api_token_create

SPEEDUP = 120.0  # runtime_s=60 runs for 0.5 s of wall time


def dry_run_endpoint_exists() -> bool:
    """Whether ``POST /api/v1/jobs/check/`` is routed to the dry run (not to the detail of a job "check")."""
    try:
        match = resolve("/api/v1/jobs/check/")
    except Resolver404:
        return False
    return match.url_name != "job-detail"


needs_dry_run = pytest.mark.skipif(
    not dry_run_endpoint_exists(),
    reason="POST /api/v1/jobs/check/ (the dry run, issue 11 item 1) is not on this branch yet",
)


@pytest.fixture
def portal_url(live_server, world, settings) -> str:
    """A live portal over the test world (A100 and T4 nodes, teams vision and nlp, the seed prices)."""
    settings.SIM_SPEEDUP = SPEEDUP
    price_book_seed_defaults()
    return live_server.url


@pytest.fixture
def key_of(world) -> Callable[[str], str]:
    """``key_of("alice")``: a fresh API token of that user (made through the token service)."""

    def make(username: str) -> str:
        return api_token_create(user=world.users[username], name=f"client tests {username}")[1]

    return make


@pytest.fixture
def cluster(portal_url) -> Iterator[None]:
    """The demo's scheduler loop in a thread for the test's duration."""
    stop = threading.Event()

    def run() -> None:
        try:
            scheduler_loop(stop, 0.1)
        finally:
            connections.close_all()  # the test database is flushed and dropped after the test

    thread = threading.Thread(target=run, name="client-tests-scheduler", daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(timeout=30)
    assert not thread.is_alive(), "the scheduler loop did not stop"


@dataclass
class Outage:
    """Make the next ``failures`` database queries of any thread fail as if PostgreSQL were down."""

    failures: int = 0
    failed: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, execute, sql, params, many, context):
        with self.lock:
            if self.failures > 0:
                self.failures -= 1
                self.failed += 1
                raise OperationalError("server closed the connection unexpectedly (test outage)")
        return execute(sql, params, many, context)


@pytest.fixture
def outage(portal_url) -> Iterator[Outage]:
    """A switch for database failures inside the live server's request threads.

    The live server opens a connection per request thread; each gets this wrapper, so the portal's
    own outage handling (``DatabaseOutageMiddleware``: 503 with ``Retry-After``) answers."""
    switch = Outage()

    def wrap(sender, connection, **kwargs) -> None:
        if threading.current_thread() is not threading.main_thread():
            connection.execute_wrappers.append(switch)

    connection_created.connect(wrap)
    yield switch
    connection_created.disconnect(wrap)
