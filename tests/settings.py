"""Settings for the test suite: the portal's own, with what a test process must set.

The portal refuses to start without ``SECRET_KEY`` unless ``DEBUG=1``; tests run with debug off (as
production does), so they bring a key of their own. The test client speaks plain HTTP, so the SSL
redirect is off. Subprocesses the tests start (Celery workers, servers) inherit these variables.
"""

import os

os.environ.setdefault("SECRET_KEY", "tests-only-secret-key-not-for-production-0123456789abcdef")
os.environ.setdefault("SECURE_SSL_REDIRECT", "0")

from portal.settings import *  # noqa: F403
