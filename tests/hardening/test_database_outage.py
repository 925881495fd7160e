"""Item 4: during a database outage the API answers 503 JSON with Retry-After, not an HTML 500.

A real server process (gunicorn) is pointed at a PostgreSQL port nothing listens on: every query
fails to connect, as in an outage. The chaos suite (``make chaos``) stops a real PostgreSQL too.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def fetch(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


@pytest.fixture(scope="module")
def server_without_database():
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:{free_port()}/portal",
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "SECRET_KEY": "outage-test-secret-key-0123456789abcdefghijklmnopqrstuvwxyz",
        "SECURE_SSL_REDIRECT": "0",
        "PYTHONPATH": str(ROOT),
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "portal.wsgi", "--bind", f"127.0.0.1:{port}", "--workers", "1"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            fetch(f"{base}/accounts/login/")
            break
        except OSError:
            assert time.monotonic() < deadline, "the server did not start"
            assert server.poll() is None, "the server exited"
            time.sleep(0.2)
    yield base
    server.terminate()
    server.wait(timeout=10)


@pytest.mark.parametrize(
    ("path", "headers"),
    [
        ("/api/v1/jobs/", {"Authorization": "Token gpt_whatever"}),
        ("/api/v1/cost/allocation?window=7d", {"Authorization": "Token gpt_whatever"}),
        ("/api/v1/teams/", {"Cookie": "sessionid=" + "a" * 32}),
        ("/healthz", {}),
    ],
)
def test_the_api_answers_503_json_with_retry_after_while_the_database_is_down(server_without_database, path, headers):
    status, response_headers, body = fetch(server_without_database + path, headers)
    assert status == 503, body[:500]
    assert response_headers["Content-Type"].startswith("application/json")
    assert int(response_headers["Retry-After"]) > 0
    assert b"database is unavailable" in body


def test_a_page_answers_503_with_retry_after_while_the_database_is_down(server_without_database):
    status, headers, _body = fetch(server_without_database + "/jobs/", {"Cookie": "sessionid=" + "a" * 32})
    assert status == 503
    assert int(headers["Retry-After"]) > 0
