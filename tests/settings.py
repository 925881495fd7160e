"""Settings for the test suite: the portal's own, with what a test process must set.

The portal refuses to start without ``SECRET_KEY`` unless ``DEBUG=1``; tests run with debug off (as
production does), so they bring a key of their own. The test client speaks plain HTTP, so the SSL
redirect is off. Subprocesses the tests start (Celery workers, servers) inherit these variables.
"""

import os

os.environ.setdefault("SECRET_KEY", "tests-only-secret-key-not-for-production-0123456789abcdef")
os.environ.setdefault("SECURE_SSL_REDIRECT", "0")
# Nothing is collected for the tests (collectstatic compresses 50 MB: minutes), so static URLs are
# the plain names; bench/bench_first_chart.py serves the real collected, compressed files.
os.environ.setdefault("STATIC_STORAGE", "simple")
# A dry run's state is rebuilt in the request, not behind it: a background thread would not see the
# test's transaction (tests of the background refresh turn it on).
os.environ.setdefault("DRY_RUN_REFRESH_BEHIND", "0")

# Under pytest-xdist (`-n 2`) each worker has its own test database (pytest-django adds the worker's
# name) and here its own Redis database: the real Celery workers one test starts must never take the
# tasks of a test running in the other worker.
_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
if _worker.startswith("gw") and os.environ.get("REDIS_URL"):
    from urllib.parse import urlsplit

    _redis = urlsplit(os.environ["REDIS_URL"])
    _db = (int(_redis.path.strip("/") or 0) + 1 + int(_worker[2:])) % 16
    os.environ["REDIS_URL"] = _redis._replace(path=f"/{_db}").geturl()

from portal.settings import *  # noqa: E402, F403
