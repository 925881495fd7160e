"""Gunicorn config for looking inside the web workers in the load benchmark (``bench_load.py``).

``BENCH_PROFILE_DIR`` (``--profile``): each worker profiles the CPU time of every request it serves
(cProfile with ``time.process_time``, between ``pre_request`` and ``post_request``) and writes its
statistics to ``$BENCH_PROFILE_DIR/web-<pid>.prof`` when it exits. Use one thread per worker: cProfile
profiles the thread that enabled it.

``BENCH_GC_DIR`` (``--gc``): each worker records every garbage collection (when it ended, its
generation, how long it held the process) and writes them to ``$BENCH_GC_DIR/gc-<pid>.json`` when
it exits, with how many objects the collector then tracked.
"""

from __future__ import annotations

import cProfile
import gc
import json
import os
import time

PROFILE_DIR = os.environ.get("BENCH_PROFILE_DIR", "")
GC_DIR = os.environ.get("BENCH_GC_DIR", "")

_profile = cProfile.Profile(time.process_time)  # CPU time, not wall time on a loaded machine
_collections: list[tuple[float, int, float]] = []  # (ended at, generation, seconds)
_started = [0.0]


def _collected(phase: str, info: dict) -> None:
    if phase == "start":
        _started[0] = time.perf_counter()
    else:
        _collections.append((time.time(), info["generation"], time.perf_counter() - _started[0]))


def post_fork(server, worker) -> None:
    if GC_DIR:
        gc.callbacks.append(_collected)


def pre_request(worker, req) -> None:
    if PROFILE_DIR:
        _profile.enable()


def post_request(worker, req, environ, resp) -> None:
    if PROFILE_DIR:
        _profile.disable()


def worker_exit(server, worker) -> None:
    if PROFILE_DIR:
        _profile.dump_stats(os.path.join(PROFILE_DIR, f"web-{os.getpid()}.prof"))
    if GC_DIR:
        with open(os.path.join(GC_DIR, f"gc-{os.getpid()}.json"), "w") as handle:
            json.dump({"collections": _collections, "tracked": len(gc.get_objects())}, handle)
