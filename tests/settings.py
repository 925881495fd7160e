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

from portal.settings import *  # noqa: F403
