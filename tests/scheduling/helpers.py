"""Helpers for the control loop's tests: worker processes, a second database session, cycles."""

from __future__ import annotations

from pathlib import Path

import psycopg
from django.db import connection
from django.test import TestCase
from django.utils import timezone

from scheduling.services import cycle_run
from tests.scheduling.adapters.conftest import settle

ROOT = Path(__file__).resolve().parents[2]


def database_url() -> str:
    """The test database's URL, for a worker process to connect to the same database."""
    db = connection.settings_dict
    host = db.get("HOST") or "127.0.0.1"
    port = db.get("PORT") or 5432
    auth = db.get("USER") or "postgres"
    if db.get("PASSWORD"):
        auth += f":{db['PASSWORD']}"
    return f"postgres://{auth}@{host}:{port}/{db['NAME']}"


def other_session():
    """A second PostgreSQL session, as another worker would have."""
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    return psycopg.connect(**{k: v for k, v in params.items() if k in {"dbname", "user", "host", "port", "password"}})


def run_cycles(backend, n=2, kube=None):
    """``n`` cycles with their on-commit pod writes, waiting for a fake Kubernetes API to settle."""
    for _ in range(n):
        if kube is not None:
            settle(backend, kube)
        with TestCase.captureOnCommitCallbacks(execute=True):
            cycle_run(now=timezone.now(), backend=backend)
    if kube is not None:
        settle(backend, kube)
