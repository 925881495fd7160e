"""Gunicorn config for profiling the web workers in the load benchmark (``bench_load.py --profile``).

Each worker profiles the CPU time of every request it serves (cProfile with ``time.process_time``,
between ``pre_request`` and ``post_request``) and writes its statistics to
``$BENCH_PROFILE_DIR/web-<pid>.prof`` when it exits. Use one thread per worker: cProfile profiles the
thread that enabled it.
"""

from __future__ import annotations

import cProfile
import os
import time

_profile = cProfile.Profile(time.process_time)  # CPU time, not wall time on a loaded machine


def pre_request(worker, req) -> None:
    _profile.enable()


def post_request(worker, req, environ, resp) -> None:
    _profile.disable()


def worker_exit(server, worker) -> None:
    _profile.dump_stats(os.path.join(os.environ["BENCH_PROFILE_DIR"], f"web-{os.getpid()}.prof"))
